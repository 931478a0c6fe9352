"""The one exception type for mistakes a user can fix (bad input, missing file, bad option).

The CLI prints its message and exits non-zero without a traceback; anything else is a bug and
keeps its traceback.
"""

import signal


class UserError(Exception):
    """A problem with the user's input; the message says what was wrong and how to fix it."""


class Terminated(SystemExit):
    """SIGTERM, raised where it lands so every `finally` (testbed teardown, rank cleanup) runs.

    A SystemExit with status 143 (128 + SIGTERM): a script that does not catch it ends as the
    default action would, without a traceback; the CLI catches it and says "terminated"."""

    def __init__(self) -> None:
        super().__init__(128 + signal.SIGTERM)


def raise_terminated(signum: int, frame: object) -> None:
    """A SIGTERM handler: raise Terminated."""
    raise Terminated()
