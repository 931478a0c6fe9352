"""The `sgdscale` command: profile -> predict -> report, plus real runs and validation.

Each group of subcommands lives in `sgdscale.commands.<area>` and registers itself here. User
mistakes raise `UserError`: one clear message on stderr, exit status 2, no traceback.
"""

from __future__ import annotations

import atexit
import importlib
import signal
import sys
import threading


def _terminated_while_loading(signum: int, frame: object) -> None:
    sys.stderr.write("terminated\n")
    raise SystemExit(128 + signum)


# Loading the commands takes most of a second: a Ctrl-C or SIGTERM then ends the process with one
# line, not a traceback from the middle of an import (nothing has been started yet).
_IN_MAIN_THREAD = threading.current_thread() is threading.main_thread()
_previous_sigterm = signal.signal(signal.SIGTERM, _terminated_while_loading) if _IN_MAIN_THREAD else None
try:
    import click

    from sgdscale import __version__
    from sgdscale.errors import UserError
    from sgdscale.interrupts import Terminated, raise_terminated
except KeyboardInterrupt:
    sys.stderr.write("interrupted\n")
    raise SystemExit(130) from None


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="sgdscale")
def app() -> None:
    """Predict how fast a model trains with data-parallel SGD on N machines, from a profile of
    one training step on one machine.

    \b
    Typical flow:
      sgdscale profile resnet50 -o r50.json         measure one step (needs torch)
      sgdscale show r50.json                        per-layer summary
      sgdscale predict r50.json --workers 1-64:x2 --bandwidth 10Gbit
    Built-in profiles (`sgdscale show --list`) let you predict without profiling anything.
    """


# Areas whose commands exist; each module defines `register(app)`.
COMMAND_MODULES = ("profile", "testbed", "runtime", "validate", "predict", "importing", "advise", "sweep")

try:
    for _module in COMMAND_MODULES:
        importlib.import_module(f"sgdscale.commands.{_module}").register(app)
except KeyboardInterrupt:
    sys.stderr.write("interrupted\n")
    raise SystemExit(130) from None
finally:
    if _IN_MAIN_THREAD:
        signal.signal(signal.SIGTERM, _previous_sigterm)


def _ignore_signals_at_exit() -> None:
    """Once the command is done, a Ctrl-C or SIGTERM while the interpreter exits would only add a
    traceback from an atexit hook (torch has some) to a finished run, or end it by the signal."""
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, signal.SIG_IGN)


def main(argv: list[str] | None = None) -> int:
    """Entry point: run the CLI and turn user errors into a message and exit status 2; Ctrl-C
    and SIGTERM unwind through every cleanup and end with one line (exit 130 and 143)."""
    previous_sigterm = signal.signal(signal.SIGTERM, raise_terminated) if _IN_MAIN_THREAD else None
    try:
        app.main(args=argv, prog_name="sgdscale", standalone_mode=False)
    except Terminated as done:
        click.echo("terminated", err=True)
        return done.code
    except UserError as error:
        click.echo(f"error: {error}", err=True)
        return 2
    except (click.exceptions.Abort, KeyboardInterrupt):
        click.echo("interrupted", err=True)
        return 130
    except click.UsageError as error:  # a bad or missing option: one line too, and where to look
        command = error.ctx.command_path if error.ctx is not None else "sgdscale"
        click.echo(f"error: {error.format_message().rstrip('.')} (see `{command} --help`)", err=True)
        return error.exit_code
    except click.ClickException as error:
        error.show()
        return error.exit_code
    except click.exceptions.Exit as done:
        return done.exit_code
    finally:
        if previous_sigterm is not None:
            signal.signal(signal.SIGTERM, previous_sigterm)
        if _IN_MAIN_THREAD:  # atexit runs the last registered first: before the hooks of what main imported
            atexit.unregister(_ignore_signals_at_exit)
            atexit.register(_ignore_signals_at_exit)
    return 0


if __name__ == "__main__":
    sys.exit(main())
