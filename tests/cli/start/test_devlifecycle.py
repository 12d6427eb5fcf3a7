"""Lifecycle commands: run inside with docker exec, stage by stage, output prefixed,
a failure reported and stopping the stages after it (a fake engine API)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import docker.errors

from cloister_cli.start import devlifecycle
from cloister_core.devcontainer import LifecycleCommand


class _Api:
    """``exec_create`` / ``exec_start`` / ``exec_inspect``: each argv's output and status."""

    def __init__(self, results: dict[str, tuple[list[bytes], int]]) -> None:
        self.results = results
        self.created: list[dict[str, Any]] = []
        self.running = 0
        self.most = 0
        self.lock = threading.Lock()

    def exec_create(self, container: str, cmd: list[str], **kwargs: Any) -> dict[str, str]:
        if cmd[-1] == "boom":
            raise docker.errors.APIError("no such container")
        self.created.append({"container": container, "cmd": cmd, **kwargs})
        return {"Id": cmd[-1]}

    def exec_start(self, exec_id: str, stream: bool) -> Iterator[bytes]:
        with self.lock:
            self.running += 1
            self.most = max(self.most, self.running)
        time.sleep(0.05)  # long enough for parallel commands to overlap
        yield from self.results[exec_id][0]
        with self.lock:
            self.running -= 1

    def exec_inspect(self, exec_id: str) -> dict[str, int]:
        return {"ExitCode": self.results[exec_id][1]}


class _Client:
    def __init__(self, api: _Api) -> None:
        self.api = api


def command(stage: Any, text: str, name: str | None = None) -> LifecycleCommand:
    return LifecycleCommand(stage, name, ("/bin/sh", "-c", text))


def run(api: _Api, commands: list[LifecycleCommand]) -> tuple[list[Any], list[tuple[str, str]]]:
    shown: list[tuple[str, str]] = []
    outcomes = devlifecycle.run_stages(
        _Client(api),  # type: ignore[arg-type]
        "cloister-api",
        commands,
        devlifecycle.CREATE_STAGES,
        user="1000:1000",
        on_line=lambda what, line: shown.append((what, line)),
    )
    return outcomes, shown


def test_stages_run_in_order_inside_as_the_user() -> None:
    api = _Api({"a": ([b"one\n"], 0), "b": ([b"two\n"], 0), "c": ([b"three"], 0)})
    outcomes, shown = run(
        api,
        [
            command("postStartCommand", "c"),
            command("postCreateCommand", "b"),
            command("onCreateCommand", "a"),
        ],
    )
    assert [item["cmd"][-1] for item in api.created] == ["a", "b", "c"]
    assert {item["user"] for item in api.created} == {"1000:1000"}
    assert {item["workdir"] for item in api.created} == {"/work"}
    assert {item["container"] for item in api.created} == {"cloister-api"}
    assert shown == [
        ("onCreateCommand", "one"),
        ("postCreateCommand", "two"),
        ("postStartCommand", "three"),
    ]
    assert not any(outcome.failed for outcome in outcomes)


def test_the_object_form_runs_in_parallel_with_labels() -> None:
    api = _Api({"x": ([b"from x\n"], 0), "y": ([b"from y\n"], 0)})
    _, shown = run(
        api,
        [
            command("postCreateCommand", "x", name="npm"),
            command("postCreateCommand", "y", name="pip"),
        ],
    )
    assert api.most == 2
    assert sorted(shown) == [
        ("postCreateCommand:npm", "from x"),
        ("postCreateCommand:pip", "from y"),
    ]


def test_a_failure_is_reported_and_stops_the_later_stages() -> None:
    api = _Api({"bad": ([b"oops\n"], 3), "later": ([], 0)})
    outcomes, _ = run(
        api, [command("onCreateCommand", "bad"), command("postCreateCommand", "later")]
    )
    assert [item["cmd"][-1] for item in api.created] == ["bad"]
    assert outcomes[0].failed
    assert outcomes[0].describe() == (
        "onCreateCommand failed (exit status 3); the cloister stays up"
    )


def test_an_engine_error_is_a_failure_not_a_crash() -> None:
    outcomes, _ = run(_Api({}), [command("postCreateCommand", "boom")])
    assert outcomes[0].failed
    assert "could not run: no such container" in outcomes[0].describe()


def test_post_attach_is_not_a_create_stage() -> None:
    api = _Api({})
    outcomes, _ = run(api, [command("postAttachCommand", "later")])
    assert outcomes == []
    assert api.created == []


def test_lines_are_split_across_chunks() -> None:
    chunks = [b"hel", b"lo\r\nwor", b"ld\n\xff", b"x"]
    assert list(devlifecycle.lines(chunks)) == ["hello", "world", "\ufffdx"]
    long = b"a" * (devlifecycle.MAX_LINE + 5)
    assert [len(line) for line in devlifecycle.lines([long])] == [devlifecycle.MAX_LINE, 5]
