"""Where the data folders are: the repository root in a checkout, ``autoplan/_data`` in a wheel."""

from __future__ import annotations

from pathlib import Path

_PACKAGE_DIR = Path(__file__).resolve().parent


def data_dir(name: str) -> Path:
    """The folder ``name`` (model_db, hardware_db, search_spaces, validation).

    A checkout (or editable install) has it next to the package; a wheel ships it as package
    data under ``autoplan/_data/`` (see ``[tool.hatch.build.targets.wheel.force-include]``).
    """
    for candidate in (_PACKAGE_DIR.parent / name, _PACKAGE_DIR / "_data" / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"autoplan data folder '{name}' is missing from the installation "
                            f"(looked in {_PACKAGE_DIR.parent} and {_PACKAGE_DIR / '_data'})")
