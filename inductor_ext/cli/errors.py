"""The two ways a command fails: the user's failure (exit 1) and a usage mistake (exit 2)."""

from __future__ import annotations


class CliError(Exception):
    """A command failed on what it was given (a missing file, a module that does not import): one
    line on stderr, exit 1."""


class UsageError(CliError):
    """The command line itself is wrong (a value no option accepts): the usage, one line, exit 2."""
