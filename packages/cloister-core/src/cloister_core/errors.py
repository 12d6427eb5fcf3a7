"""The exceptions cloister-core raises; every one says what was wrong with ``!r``."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


class CloisterError(Exception):
    """Base class of every error raised by Cloister's libraries."""


class CloisterNameError(CloisterError, ValueError):
    """A project, cloister or branch name that Cloister cannot use."""


class InvalidHostError(CloisterError, ValueError):
    """A host name, IP literal or pattern that cannot be normalised."""


class InvalidCommandError(CloisterError, ValueError):
    """A hostexec argv that cannot be turned into a canonical command."""


class TokenError(CloisterError):
    """A token file that is missing, unreadable or malformed."""


class ConfigError(CloisterError):
    """A configuration or decision file that is not valid.

    ``str()`` gives ``<file>:<line>:<column>: <message>`` (line and column 1-based) so
    editors and terminals can jump to the spot; one exception may carry several
    problems, one per line.
    """

    def __init__(self, path: Path, problems: list[ConfigProblem]) -> None:
        self.path = path
        self.problems = problems
        super().__init__("\n".join(problem.render(path) for problem in problems))

    @property
    def line(self) -> int | None:
        """Line of the first problem (1-based), if known."""
        return self.problems[0].line if self.problems else None


@dataclass(frozen=True, slots=True)
class ConfigProblem:
    """One thing wrong in a config file, at a 1-based line and column when known."""

    message: str
    line: int | None = None
    column: int | None = None

    def render(self, path: Path) -> str:
        where = str(path)
        if self.line is not None:
            where += f":{self.line}"
            if self.column is not None:
                where += f":{self.column}"
        return f"{where}: {self.message}"
