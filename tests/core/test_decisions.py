"""The decision store: add/undo, comment preservation, atomicity, concurrent writers."""

from __future__ import annotations

import threading
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

import pytest

from cloister_core.config import load_decision_file
from cloister_core.config.models import RuleEntry
from cloister_core.decisions import DecisionStore
from cloister_core.errors import ConfigError
from cloister_core.fileio import lock_path
from cloister_core.paths import CloisterPaths


@pytest.fixture
def paths(tmp_path: Path) -> CloisterPaths:
    return CloisterPaths(config_dir=tmp_path / "config", data_dir=tmp_path / "data")


@pytest.fixture
def store(paths: CloisterPaths) -> DecisionStore:
    return DecisionStore(paths)


def test_add_creates_file_with_header(store: DecisionStore, paths: CloisterPaths) -> None:
    change = store.add("project", "allow", RuleEntry(pattern="*.Example.com"), project="my-api")
    assert change.changed
    assert change.path == paths.project_decisions("my-api")
    text = change.path.read_text(encoding="utf-8")
    assert text.startswith("# Decisions made in the Cloister approval UI (project my-api).")
    assert "- pattern: '*.example.com'" in text
    assert store.load("project", "my-api").allow == (RuleEntry(pattern="*.example.com"),)
    assert not list(change.path.parent.glob(".*.tmp"))


def test_add_is_idempotent_and_undo_removes_only_its_entry(store: DecisionStore) -> None:
    first = store.add("global", "deny", RuleEntry(domain="evil.test"))
    again = store.add("global", "deny", RuleEntry(domain="EVIL.test."))
    assert first.changed
    assert not again.changed
    store.add("global", "deny", RuleEntry(domain="other.test"))
    removed = store.remove("global", "deny", RuleEntry(domain="evil.test"))
    assert removed.changed
    assert store.load("global").deny == (RuleEntry(domain="other.test"),)
    assert not store.remove("global", "deny", RuleEntry(domain="evil.test")).changed


def test_ports_are_part_of_the_entry(store: DecisionStore) -> None:
    store.add("global", "allow", RuleEntry(domain="a.test", ports=(8443,)))
    store.add("global", "allow", RuleEntry(domain="a.test"))
    assert len(store.load("global").allow) == 2
    text = store.path_for("global").read_text(encoding="utf-8")
    assert "ports: [8443]" in text
    store.remove("global", "allow", RuleEntry(domain="a.test", ports=(8443,)))
    assert store.load("global").allow == (RuleEntry(domain="a.test"),)


def test_comments_survive_round_trip(store: DecisionStore) -> None:
    path = store.path_for("global")
    path.parent.mkdir(parents=True)
    path.write_text(
        "# my own header\n"
        "allow:\n"
        "  # the docs mirror, asked for by Ann\n"
        "  - domain: docs.test  # keep\n"
        "deny: []  # nothing yet\n",
        encoding="utf-8",
    )
    store.add("global", "allow", RuleEntry(domain="new.test"))
    store.add("global", "deny", RuleEntry(pattern="**.bad.test"))
    text = path.read_text(encoding="utf-8")
    for comment in ("# my own header", "# the docs mirror, asked for by Ann", "# keep"):
        assert comment in text
    decisions = load_decision_file(path)
    assert [entry.target for entry in decisions.allow] == ["docs.test", "new.test"]
    assert [entry.target for entry in decisions.deny] == ["**.bad.test"]
    store.remove("global", "allow", RuleEntry(domain="new.test"))
    assert "# the docs mirror, asked for by Ann" in path.read_text(encoding="utf-8")


def test_broken_file_is_never_overwritten(store: DecisionStore) -> None:
    path = store.path_for("global")
    path.parent.mkdir(parents=True)
    broken = "allow:\n  - domain: a.test\n   - oops\n"
    path.write_text(broken, encoding="utf-8")
    with pytest.raises(ConfigError, match=rf"^{path}:3:"):
        store.add("global", "allow", RuleEntry(domain="b.test"))
    assert path.read_text(encoding="utf-8") == broken
    path.write_text("allow:\n  - domian: a.test\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="unknown key 'domian'"):
        store.remove("global", "allow", RuleEntry(domain="a.test"))


def test_project_scope_needs_a_valid_project(store: DecisionStore) -> None:
    with pytest.raises(ValueError, match="needs its project's name"):
        store.path_for("project")
    with pytest.raises(ValueError, match="not valid"):
        store.path_for("project", "../../etc")


def test_twenty_threads_writing_at_once_lose_nothing(store: DecisionStore) -> None:
    barrier = threading.Barrier(20)
    errors: list[BaseException] = []

    def writer(index: int) -> None:
        try:
            barrier.wait()
            for round_ in range(3):
                store.add("project", "allow", RuleEntry(domain=f"t{index}-r{round_}.test"), "p")
        except BaseException as error:  # pragma: no cover - reported below
            errors.append(error)

    threads = [threading.Thread(target=writer, args=(index,)) for index in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    entries = {entry.target for entry in store.load("project", "p").allow}
    assert entries == {f"t{i}-r{r}.test" for i in range(20) for r in range(3)}
    assert lock_path(store.path_for("project", "p")).exists()


def _process_writer(config_dir: str, index: int) -> None:
    store = DecisionStore(CloisterPaths(Path(config_dir), Path(config_dir) / "data"))
    for round_ in range(5):
        store.add("global", "deny", RuleEntry(domain=f"p{index}-r{round_}.test"))


def test_processes_writing_at_once_lose_nothing(paths: CloisterPaths, store: DecisionStore) -> None:
    with ProcessPoolExecutor(max_workers=4, mp_context=get_context("spawn")) as pool:
        list(pool.map(_process_writer, [str(paths.config_dir)] * 4, range(4)))
    entries = {entry.target for entry in store.load("global").deny}
    assert entries == {f"p{i}-r{r}.test" for i in range(4) for r in range(5)}
