"""Shared pytest wiring: the ``docker`` and ``browser`` markers and what they need.

Tests marked ``@pytest.mark.docker`` need a reachable Docker engine (probed once per
session); tests marked ``@pytest.mark.browser`` need Debian's Chromium for Playwright.
Without them such a test is skipped on a developer's machine but *fails* when the
``CI`` environment variable is set (CI must prove the behaviour, not quietly skip it).
Lines at the end of the run say how many marked tests passed, failed and were skipped.

The ``cloister`` commands the tests run start this installation's command server
(:mod:`cloister_cli.launch`); the servers the session started are stopped at its end.
"""

from __future__ import annotations

import contextlib
import gc
import os
import signal
import sys
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, NoReturn, Protocol

import docker
import docker.errors
import pytest
import requests
from hypothesis import settings as hypothesis_settings

DOCKER_MARKER = "docker"
BROWSER_MARKER = "browser"
CHROMIUM = "/usr/bin/chromium"
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
class MarkerTally:
    """Which collected items carry a marker, and how each one ended."""

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
        pytest.fail(f"{reason}; CI is set, and CI requires these tests to run", pytrace=False)
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


class TallyPlugin:
    """Counts the docker- and browser-marked tests by outcome and prints the tallies,
    so a CI log shows that they ran rather than skipped."""

    def __init__(self) -> None:
        self.tallies = {DOCKER_MARKER: MarkerTally(), BROWSER_MARKER: MarkerTally()}

    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        for marker, tally in self.tallies.items():
            tally.marked.update(
                item.nodeid for item in items if item.get_closest_marker(marker) is not None
            )

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        for tally in self.tallies.values():
            if report.nodeid not in tally.marked:
                continue
            if report.failed:
                tally.record(report.nodeid, "failed")
            elif report.skipped:
                tally.record(report.nodeid, "skipped")
            elif report.when == "call":
                tally.record(report.nodeid, "passed")

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        for marker, tally in self.tallies.items():
            terminalreporter.write_line(
                f"{marker}-marked tests: {tally.count('passed')} passed, "
                f"{tally.count('failed')} failed, {tally.count('skipped')} skipped"
            )


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(TallyPlugin(), "cloister-marker-tally")


def chromium_path() -> str:
    """Debian's Chromium, or $CLOISTER_CHROMIUM; Playwright drives it (no browser download)."""
    return os.environ.get("CLOISTER_CHROMIUM", CHROMIUM)


def require_browser() -> None:
    path = chromium_path()
    if not os.access(path, os.X_OK):
        _skip_or_fail(f"no Chromium at {path} (apt-get install chromium, or set CLOISTER_CHROMIUM)")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError as error:
        _skip_or_fail(f"playwright is not installed: {error}")


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker(DOCKER_MARKER) is not None:
        require_engine(item.config)
    if item.get_closest_marker(BROWSER_MARKER) is not None:
        require_browser()


@pytest.fixture(scope="session")
def docker_client(pytestconfig: pytest.Config) -> Iterator[docker.DockerClient]:
    """A Docker SDK client for the session's engine, closed at session end."""
    require_engine(pytestconfig)
    client = docker.from_env()
    try:
        yield client
    finally:
        client.close()


def command_servers() -> set[int]:
    """The pids of this installation's command servers (this Python's, any user's)."""
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:  # gone meanwhile
            continue
        if argv[0] == os.fsencode(sys.executable) and b"cloister_cli.launch.server" in argv:
            found.add(int(entry.name))
    return found


@pytest.fixture(scope="session", autouse=True)
def command_servers_stopped() -> Iterator[None]:
    """Stop, at the session's end, the command servers its commands started (each
    would otherwise wait 10 idle minutes); one running before the session stays."""
    before = command_servers()
    yield
    for pid in command_servers() - before:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)


@pytest.fixture(scope="session")
def skip_or_fail() -> SkipOrFail:
    """The marker's rule for a prerequisite found missing at run time: skip, or fail in CI."""
    return _skip_or_fail
