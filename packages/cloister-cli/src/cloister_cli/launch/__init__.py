"""How a ``cloister`` command runs: in its own process, or forked from a warm one.

Most of a command's time before it does anything is Python importing what it needs (the
config models, the engine's client, the library: about 0.3 s for ``cloister start``,
more than half of what the command adds to a bare ``docker run``). So the console
script (:mod:`cloister_cli.launch.client`, which imports only the standard library's
light modules) hands the command to a *command server* of the same installation that
has imported it all already, the way build tools keep a daemon (Gradle, Bazel) or mypy
its ``dmypy``: the server forks, and the fork runs the command with the caller's
arguments, environment, working directory, umask and standard streams (passed as file
descriptors), so it behaves as if the caller had run it; its exit status is the
caller's. A command that needs the person's terminal for a program of its own (the
shell of ``cloister start``, ``cloister exec`` with a terminal) asks the caller to run
that program (:func:`run_in_terminal`), so it is in the terminal's foreground and gets
its signals and window size.

When there is no server (the first command after a while, or after an upgrade), the
command runs in its own process as before and starts one in the background for the
next. Who may use it, and when it is not used, is in :mod:`cloister_cli.launch.wire`;
the server itself in :mod:`cloister_cli.launch.server`. ``CLOISTER_NO_SERVER=1`` runs
every command in its own process.
"""

from __future__ import annotations

from cloister_cli.launch.terminal import run_in_terminal

__all__ = ["run_in_terminal"]
