"""The ``autoplan`` command line: parse options, call the library, format the output.

Commands live in one module each under ``autoplan/cli/``; heavy imports (pandas, optuna,
matplotlib) happen inside commands so ``autoplan --help`` stays fast. Every error on user input
becomes one line on stderr and exit code 2 (1 when no plan is feasible), never a traceback.
"""

from __future__ import annotations

import errno
import importlib
import importlib.util
import os
import sys

import click

from autoplan import __version__
from autoplan.errors import AutoplanError, escape

MAX_MESSAGE_CHARS = 1000  # an error line longer than this is cut (a value echoed whole by a library)


def error_line(message: str) -> str:
    """One line for stderr: control characters escaped (nothing a terminal would act on), cut
    to ``MAX_MESSAGE_CHARS`` with an ellipsis."""
    text = escape(" ".join(str(message).splitlines()))
    return text if len(text) <= MAX_MESSAGE_CHARS else text[:MAX_MESSAGE_CHARS - 1] + "…"

# (module, command names) registered on the group; each module defines those click commands.
_COMMAND_MODULES = [
    ("autoplan.cli.info", ("models", "hardware", "trainers")),
    ("autoplan.cli.estimate", ("estimate", "compare", "explain")),
    ("autoplan.cli.search", ("search",)),
    ("autoplan.cli.capacity", ("capacity",)),
    ("autoplan.cli.export", ("export",)),
    ("autoplan.cli.calibrate", ("calibrate", "validate")),
    ("autoplan.cli.probe", ("probe",)),
    ("autoplan.cli.trial", ("trial",)),
    ("autoplan.cli.rerank", ("rerank",)),
]


class AutoplanGroup(click.Group):
    """Loads commands lazily and turns user errors into one clear line."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        names = []
        for module, commands in _COMMAND_MODULES:
            if importlib.util.find_spec(module) is not None:
                names += commands
        return sorted(names)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        for module, commands in _COMMAND_MODULES:
            if name in commands and importlib.util.find_spec(module) is not None:
                return getattr(importlib.import_module(module), f"{name}_command")
        return None

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        """Click's usage errors as one line ('Error: ...' + exit 2), not the usage block."""
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode, **extra)
        try:
            code = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
            # Without standalone mode click returns the code of ctx.exit(); commands return None.
            sys.exit(code if isinstance(code, int) else 0)
        except click.exceptions.Exit as exc:
            sys.exit(exc.exit_code)
        except click.ClickException as exc:
            hint = ""
            if isinstance(exc, click.UsageError) and exc.ctx is not None:
                hint = f" (see '{exc.ctx.command_path} --help')"
            click.echo(error_line(f"Error: {' '.join(exc.format_message().split())}") + hint, err=True)
            sys.exit(exc.exit_code)
        except click.Abort:
            click.echo("Aborted.", err=True)
            sys.exit(130)
        except BrokenPipeError:  # the reader left (`autoplan search | head`): stop quietly
            _silence_stdout()
            sys.exit(0)

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except AutoplanError as exc:
            click.echo(error_line(f"Error: {exc}"), err=True)
            ctx.exit(getattr(exc, "exit_code", 2))
        except FileNotFoundError as exc:
            click.echo(error_line(f"Error: {exc}"), err=True)
            ctx.exit(2)
        except BrokenPipeError:
            # handled in main(); raised anew without errno, as click's own main would turn an
            # EPIPE error into exit code 1
            raise BrokenPipeError from None
        except OSError as exc:  # the machine refused a read or write: disk full, read-only, ...
            click.echo(error_line(f"Error: {_where(exc)}{exc.strerror or exc}"), err=True)
            ctx.exit(2)
        except (click.exceptions.Exit, click.ClickException, click.Abort, SystemExit):
            raise
        except KeyboardInterrupt:
            click.echo("Interrupted.", err=True)
            ctx.exit(130)
        except Exception as exc:  # noqa: BLE001 - the last line of defence against tracebacks
            if os.environ.get("AUTOPLAN_DEBUG"):
                raise
            click.echo(error_line(f"Internal error: {type(exc).__name__}: {exc}")
                       + " (set AUTOPLAN_DEBUG=1 for the traceback, and please report it)", err=True)
            ctx.exit(3)


# A write refused for want of space or by the device. Every file autoplan writes goes through
# autoplan.report.destination (an OutputError naming it), so such an error without a file name
# came from printing: `autoplan search > /dev/full`.
_WRITE_ERRNOS = {errno.ENOSPC, errno.EFBIG, errno.EIO, getattr(errno, "EDQUOT", errno.ENOSPC)}


def _where(exc: OSError) -> str:
    """'<file>: ' of an OSError, 'standard output: ' for a failed print, else ''."""
    if exc.filename:
        return f"{exc.filename}: "
    return "cannot write standard output: " if exc.errno in _WRITE_ERRNOS else ""


def _silence_stdout() -> None:
    """Point stdout at /dev/null so that Python's flush at exit does not fail again (the
    recipe of the Python docs, 'Note on SIGPIPE')."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


@click.group(cls=AutoplanGroup, context_settings={"help_option_names": ["-h", "--help"],
                                                  "max_content_width": 100})
@click.version_option(__version__, prog_name="autoplan")
def main() -> None:
    """Plan parallel layouts for training large language models on GPU clusters.

    \b
    Typical use:
      autoplan search --model 70b --gpus 512 --gbs-tokens 4M
      autoplan estimate --model 8b --gpus 64 --tp 2 --pp 1 --gbs-tokens 4M
      autoplan models / autoplan hardware / autoplan trainers

    Token counts take binary suffixes, the field's convention: 4M = 4·2^20 = 4,194,304 tokens
    (plain integers and 4e6 are literal).
    """


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
