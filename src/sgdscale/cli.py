"""The `sgdscale` command: profile -> predict -> report, plus real runs and validation.

Each group of subcommands lives in `sgdscale.commands.<area>` and registers itself here. User
mistakes raise `UserError`: one clear message on stderr, exit status 2, no traceback.
"""

from __future__ import annotations

import importlib
import sys

import click

from sgdscale import __version__
from sgdscale.errors import UserError


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

for _module in COMMAND_MODULES:
    importlib.import_module(f"sgdscale.commands.{_module}").register(app)


def main(argv: list[str] | None = None) -> int:
    """Entry point: run the CLI and turn user errors into a message and exit status 2."""
    try:
        app.main(args=argv, prog_name="sgdscale", standalone_mode=False)
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
