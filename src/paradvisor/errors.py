"""The two kinds of failure the command line turns into exit codes.

`InputError` (exit 2): the user gave something unusable — a broken file, an unknown name, an
impossible constraint. Its message is one line naming the file/key and what was expected.
`RunFailed` (exit 1): the input was fine but the action failed (a run crashed, a probe failed).
"""

from __future__ import annotations


class InputError(Exception):
    """Bad input: printed as one line, exit code 2."""

    exit_code = 2

    def __init__(self, message: str, *, where: str | object | None = None):
        where = None if where is None else str(where)  # a lazy location (tomlfile.Where) is located now
        self.where = where
        self.message = message
        super().__init__(f"{where}: {message}" if where else message)


class RunFailed(Exception):
    """A run or action failed: printed as one line, exit code 1."""

    exit_code = 1
