"""The one exception type for mistakes a user can fix (bad input, missing file, bad option).

The CLI prints its message and exits non-zero without a traceback; anything else is a bug and
keeps its traceback.
"""


class UserError(Exception):
    """A problem with the user's input; the message says what was wrong and how to fix it."""
