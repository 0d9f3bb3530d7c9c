"""``python -m autoplan.cli``: the ``autoplan`` command."""

import sys

from autoplan.cli import main

if __name__ == "__main__":
    sys.exit(main())
