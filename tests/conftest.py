"""Shared pytest wiring: the ``docker`` marker and the Docker engine it needs.

Tests marked ``@pytest.mark.docker`` need a reachable Docker engine. Whether one is
reachable is probed once per session. Without one such a test is skipped on a
developer's machine but *fails* when the ``CI`` environment variable is set (CI must
prove the container behaviour, not quietly skip it). A line at the end of the run says
how many Docker-marked tests passed, failed and were skipped.
"""

from __future__ import annotations

import gc
import os
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Literal, NoReturn, Protocol

import docker
import docker.errors
import pytest
import requests
from hypothesis import settings as hypothesis_settings

DOCKER_MARKER = "docker"
PROBE_TIMEOUT_SECONDS = 5

Outcome = Literal["passed", "failed", "skipped"]


class SkipOrFail(Protocol):
    def __call__(self, reason: str) -> NoReturn: ...


@dataclass(frozen=True)
class EngineProbe:
    """The once-per-session answer to "is a Docker engine reachable?"."""

    error: str | None

    @property
    def reachable(self) -> bool:
        return self.error is None


@dataclass
class DockerTally:
    """Which collected items carry the docker marker, and how each one ended."""

    marked: set[str] = field(default_factory=set)
    outcomes: dict[str, Outcome] = field(default_factory=dict)

    def record(self, nodeid: str, outcome: Outcome) -> None:
        # A test counts once: a failure in any phase wins over a skip, a skip over a pass.
        rank: dict[Outcome, int] = {"passed": 0, "skipped": 1, "failed": 2}
        previous = self.outcomes.get(nodeid)
        if previous is None or rank[outcome] > rank[previous]:
            self.outcomes[nodeid] = outcome

    def count(self, outcome: Outcome) -> int:
        return sum(1 for value in self.outcomes.values() if value == outcome)


_PROBE_KEY = pytest.StashKey[EngineProbe]()

# Property tests must not fail because a shared CI machine was slow for one example.
hypothesis_settings.register_profile("cloister", deadline=None)
hypothesis_settings.load_profile("cloister")


def in_ci() -> bool:
    return os.environ.get("CI", "") != ""


def _skip_or_fail(reason: str) -> NoReturn:
    """Skip the current test, or fail it when running under CI (``CI`` set, non-empty)."""
    if in_ci():
        pytest.fail(f"{reason}; CI is set, and CI requires the Docker tests to run", pytrace=False)
    pytest.skip(reason)


_PROBE_ERRORS = (docker.errors.DockerException, requests.RequestException, OSError)


def _connect_and_ping() -> str | None:
    """None if the engine answers a ping, else what went wrong."""
    try:
        client = docker.from_env(timeout=PROBE_TIMEOUT_SECONDS)
    except _PROBE_ERRORS as exc:
        return f"{type(exc).__name__}: {exc}"
    try:
        client.ping()
    except _PROBE_ERRORS as exc:
        return f"{type(exc).__name__}: {exc}"
    finally:
        client.close()
    return None


def _probe_engine() -> EngineProbe:
    # When the engine's socket is missing, the docker SDK's Unix-socket adapter drops the
    # socket it failed to connect without closing it. Let that socket be collected here,
    # with its ResourceWarning ignored, rather than surface later as an unraisable
    # exception (which the repo's filterwarnings=error would turn into a failed run).
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        error = _connect_and_ping()
        gc.collect()
    return EngineProbe(error=error)


def engine_probe(config: pytest.Config) -> EngineProbe:
    """The session's cached engine probe (probed on first use)."""
    probe = config.stash.get(_PROBE_KEY, None)
    if probe is None:
        probe = _probe_engine()
        config.stash[_PROBE_KEY] = probe
    return probe


def require_engine(config: pytest.Config) -> None:
    probe = engine_probe(config)
    if not probe.reachable:
        _skip_or_fail(
            f"no Docker engine reachable ({probe.error}); start one, e.g. with .ci/run's recipe"
        )


class DockerTallyPlugin:
    """Counts the docker-marked tests by outcome and prints the tally at the end."""

    def __init__(self) -> None:
        self.tally = DockerTally()

    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        self.tally.marked.update(
            item.nodeid for item in items if item.get_closest_marker(DOCKER_MARKER) is not None
        )

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.nodeid not in self.tally.marked:
            return
        if report.failed:
            self.tally.record(report.nodeid, "failed")
        elif report.skipped:
            self.tally.record(report.nodeid, "skipped")
        elif report.when == "call":
            self.tally.record(report.nodeid, "passed")

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        tally = self.tally
        terminalreporter.write_line(
            f"docker-marked tests: {tally.count('passed')} passed, "
            f"{tally.count('failed')} failed, {tally.count('skipped')} skipped"
        )


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(DockerTallyPlugin(), "cloister-docker-tally")


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker(DOCKER_MARKER) is not None:
        require_engine(item.config)


@pytest.fixture(scope="session")
def docker_client(pytestconfig: pytest.Config) -> Iterator[docker.DockerClient]:
    """A Docker SDK client for the session's engine, closed at session end."""
    require_engine(pytestconfig)
    client = docker.from_env()
    try:
        yield client
    finally:
        client.close()


@pytest.fixture(scope="session")
def skip_or_fail() -> SkipOrFail:
    """The marker's rule for a prerequisite found missing at run time: skip, or fail in CI."""
    return _skip_or_fail
