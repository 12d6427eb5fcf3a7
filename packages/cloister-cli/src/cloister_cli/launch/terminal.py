"""Run a program in the person's terminal, from a command in its own process or served.

A served command (:mod:`cloister_cli.launch.server`) has the caller's standard streams
but not its terminal: it is in the server's session, so the terminal's signals (Ctrl-C,
Ctrl-Z, a resized window) go to the caller. A program that takes the terminal over (the
shell ``cloister start`` attaches, ``docker exec -it``) is therefore run by the caller,
in the terminal's foreground, and the command waits for its exit status.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False  # the console script imports this module: not even typing's import
if TYPE_CHECKING:
    from collections.abc import Callable

# Set in a served command's process: sends the caller a program to run, and waits for its
# exit status (cloister_cli.launch.server).
_caller: Callable[[list[str], dict[str, str]], int] | None = None


def serve_from(runner: Callable[[list[str], dict[str, str]], int]) -> None:
    """This process is a served command: *runner* has the caller run a program."""
    global _caller  # noqa: PLW0603 - one per process, set once when it is forked
    _caller = runner


def run_in_terminal(argv: list[str]) -> int:
    """Run *argv* (its program's path first) in the person's terminal, in the command's
    starting directory (a served command's is its caller's), with the command's
    environment; its exit status."""
    if _caller is None:
        import subprocess  # noqa: PLC0415 - the console script imports this module

        return subprocess.run(argv, check=False).returncode
    return _caller(argv, dict(os.environ))
