"""A devcontainer's lifecycle commands, run inside the cloister (never on the host).

When ``cloister start`` has created a container: ``onCreateCommand``,
``updateContentCommand``, ``postCreateCommand``, then ``postStartCommand`` (every start
makes a new container, so each start is a creation and a start). ``postAttachCommand``
runs each time ``cloister start`` attaches a shell or an agent (not with ``-d``, and not
for ``cloister exec``). ``initializeCommand`` would run on the host: the loader refuses
it and nothing here could run it.

Each command is a ``docker exec`` in ``/work`` as the cloister's user (its uid:gid),
with the container's environment, so its traffic goes through the proxy like the
agent's. The commands of one stage (the object form) run in parallel; their output is
streamed line by line, each line with its command's label. As the specification says,
a failing stage stops the stages after it; the cloister stays up either way, and the
caller reports the failure with its exit status.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

import docker
import docker.errors

from cloister_cli.container.engine import Engine
from cloister_core.devcontainer import LifecycleCommand, LifecycleStage

CREATE_STAGES: tuple[LifecycleStage, ...] = (
    "onCreateCommand",
    "updateContentCommand",
    "postCreateCommand",
    "postStartCommand",
)
ATTACH_STAGES: tuple[LifecycleStage, ...] = ("postAttachCommand",)
WORKDIR = "/work"
MAX_LINE = 64 * 1024  # a longer run without a newline is shown in pieces

OnLine = Callable[[str, str], None]  # (label, one line of output)


@dataclass(frozen=True, slots=True)
class Outcome:
    """How one command ended: its exit status, or why it could not run."""

    command: LifecycleCommand
    exit_code: int | None
    error: str | None = None

    @property
    def failed(self) -> bool:
        return self.error is not None or self.exit_code != 0

    def describe(self) -> str:
        """One line for a warning: which command, and how it failed."""
        how = self.error if self.error is not None else f"exit status {self.exit_code}"
        return f"{label(self.command)} failed ({how}); the cloister stays up"


def label(command: LifecycleCommand) -> str:
    """``postCreateCommand``, or ``postCreateCommand:name`` for the object form."""
    return command.stage if command.name is None else f"{command.stage}:{command.name}"


def lines(chunks: Iterable[bytes]) -> Iterator[str]:
    """The lines of a byte stream (decoded leniently; a last line without newline too)."""
    pending = b""
    for chunk in chunks:
        pending += chunk
        while b"\n" in pending or len(pending) > MAX_LINE:
            cut = pending.find(b"\n")
            cut = MAX_LINE if cut < 0 or cut > MAX_LINE else cut
            yield pending[:cut].decode("utf-8", "replace").rstrip("\r")
            pending = pending[cut + 1 :] if pending[cut : cut + 1] == b"\n" else pending[cut:]
    if pending:
        yield pending.decode("utf-8", "replace").rstrip("\r")


def run_one(
    client: Engine,
    container: str,
    command: LifecycleCommand,
    *,
    user: str,
    on_line: OnLine,
) -> Outcome:
    """``docker exec`` of *command* in *container*; its output to *on_line* as it comes."""
    try:
        created = client.api.exec_create(
            container, list(command.argv), user=user, workdir=WORKDIR, stdout=True, stderr=True
        )
        stream = client.api.exec_start(created["Id"], stream=True)
        for line in lines(stream):
            on_line(label(command), line)
        code = client.api.exec_inspect(created["Id"]).get("ExitCode")
    except docker.errors.APIError as error:
        return Outcome(command, None, f"could not run: {error.explanation or error}")
    return Outcome(command, code if isinstance(code, int) else None)


def run_stages(
    client: Engine,
    container: str,
    commands: Sequence[LifecycleCommand],
    stages: Sequence[LifecycleStage],
    *,
    user: str,
    on_line: OnLine,
) -> list[Outcome]:
    """Run *commands* of *stages*, stage by stage (a stage's commands in parallel); every
    outcome, in the file's order. A failed stage stops the ones after it."""
    lock = threading.Lock()

    def shown(what: str, line: str) -> None:
        with lock:  # one line at a time, whichever command printed it
            on_line(what, line)

    outcomes: list[Outcome] = []
    for stage in stages:
        batch = [command for command in commands if command.stage == stage]
        if not batch:
            continue
        done = _run_batch(client, container, batch, user=user, on_line=shown)
        outcomes += done
        if any(result.failed for result in done):
            break
    return outcomes


def _run_batch(
    client: Engine,
    container: str,
    batch: Sequence[LifecycleCommand],
    *,
    user: str,
    on_line: OnLine,
) -> list[Outcome]:
    """The commands of one stage, in parallel; their outcomes in the file's order."""
    results: list[Outcome] = [Outcome(command, None, "did not run") for command in batch]

    def work(index: int, command: LifecycleCommand) -> None:
        try:
            results[index] = run_one(client, container, command, user=user, on_line=on_line)
        except Exception as error:  # reported like a failed command, never lost
            results[index] = Outcome(command, None, f"{type(error).__name__}: {error}")

    threads = [
        threading.Thread(target=work, args=(index, command), daemon=True)
        for index, command in enumerate(batch)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results
