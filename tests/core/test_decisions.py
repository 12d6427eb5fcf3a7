"""The decision store: add/undo, comment preservation, atomicity, concurrent writers."""

from __future__ import annotations

import shutil
import threading
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

import pytest

from cloister_core.commands import CommandPolicy, canonical_command
from cloister_core.config import load_decision_file
from cloister_core.config.models import CommandRules, RuleEntry
from cloister_core.decisions import DecisionStore, Migration, migrate_approvals
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


@pytest.mark.parametrize(
    "argv",
    [
        ["git", "push", "origin", "main"],
        ["echo", "it's (fine) [a-z]*?"],
        ["printf", "%s,%d\\n", "a.b|c^d$e{2}"],
        ["echo", "two\nlines"],
        ["echo", "café"],
    ],
)
def test_an_approved_command_is_a_pattern_for_exactly_it(
    store: DecisionStore, paths: CloisterPaths, argv: list[str]
) -> None:
    command = canonical_command(argv)
    change = store.add_command("project", command, "api")
    (written,) = load_decision_file(paths.project_decisions("api")).hostexec.auto_approve
    assert written.pattern == change.pattern
    commands = CommandPolicy.from_rules([(change.path, CommandRules(auto_approve=(written,)))])
    assert commands.decide(argv).action == "auto_approve"
    assert commands.decide([*argv, "--force"]).action == "deny"
    assert commands.decide([argv[0], *argv[1:-1], argv[-1] + "x"]).action == "deny"
    assert store.remove_command("project", command, "api").changed


def test_a_new_file_has_its_lists_under_proxy_as_config_yaml(store: DecisionStore) -> None:
    change = store.add("global", "allow", RuleEntry(domain="a.test"))
    store.add_command("global", "make test")
    text = change.path.read_text(encoding="utf-8")
    assert "proxy:\n  allow:\n    - domain: a.test\n" in text
    assert "hostexec:\n  auto_approve:\n" in text
    assert store.load("global").allow == (RuleEntry(domain="a.test"),)
    assert store.remove("global", "allow", RuleEntry(domain="a.test")).changed
    assert store.load("global").allow == ()


def test_a_file_with_its_lists_at_the_top_keeps_that_shape(store: DecisionStore) -> None:
    path = store.path_for("project", "p")
    path.parent.mkdir(parents=True)
    path.write_text("allow:\n  - domain: old.test\n", encoding="utf-8")
    store.add("project", "deny", RuleEntry(domain="bad.test"), "p")
    assert path.read_text(encoding="utf-8") == (
        "allow:\n  - domain: old.test\ndeny:\n  - domain: bad.test\n"
    )


def test_a_file_in_the_go_implementations_shape_takes_global_decisions(
    store: DecisionStore,
) -> None:
    path = store.path_for("global")
    path.parent.mkdir(parents=True)
    reference = Path(__file__).parent / "config" / "fixtures" / "reference"
    text = (reference / "reference-decisions.yaml").read_text(encoding="utf-8")
    path.write_text(text, encoding="utf-8")
    # Refused before: the hub then fell back to a session decision.
    assert store.add("global", "allow", RuleEntry(domain="new.test")).changed
    assert not store.add("global", "allow", RuleEntry(domain="pkg.go.dev")).changed
    assert store.remove("global", "deny", RuleEntry(pattern="*.sketchy.io")).changed
    written = path.read_text(encoding="utf-8")
    assert written.startswith(text.split("proxy:")[0])  # its comments are kept
    assert "    - domain: new.test\n" in written
    assert "allow:" not in written.split("proxy:")[0]  # nothing at the top
    decisions = load_decision_file(path)
    assert decisions.allow[-1] == RuleEntry(domain="new.test")
    assert RuleEntry(pattern="*.sketchy.io") not in decisions.deny


def test_both_shapes_in_one_file_are_merged(store: DecisionStore) -> None:
    path = store.path_for("global")
    path.parent.mkdir(parents=True)
    path.write_text(
        "allow:\n  - domain: top.test\nproxy:\n  allow:\n    - domain: nested.test\n",
        encoding="utf-8",
    )
    assert [entry.target for entry in store.load("global").allow] == ["top.test", "nested.test"]
    assert not store.add("global", "allow", RuleEntry(domain="top.test")).changed
    store.add("global", "allow", RuleEntry(domain="third.test"))
    assert "    - domain: third.test\n" in path.read_text(encoding="utf-8")
    path.write_text("proxy:\n  allow:\n    - domian: x.test\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=rf"^{path}:3:7: unknown key 'domian' in proxy\.allow"):
        store.load("global")
    path.write_text("proxy:\n  listen: ':3128'\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="a decision file holds only allow and deny there"):
        store.load("global")


def test_files_are_the_users_alone(store: DecisionStore) -> None:
    path = store.path_for("project", "p")
    path.parent.mkdir(parents=True)
    path.write_text("allow: []\n", encoding="utf-8")
    path.chmod(0o644)  # as earlier versions wrote it
    store.add("project", "allow", RuleEntry(domain="a.test"), "p")
    assert path.stat().st_mode & 0o777 == 0o600
    session = store.add_command("session", "make test", "api").path
    assert session.stat().st_mode & 0o777 == 0o600


def test_the_go_implementations_approvals_directory_is_moved(paths: CloisterPaths) -> None:
    reference = Path(__file__).parent / "config" / "fixtures" / "reference" / "approvals"
    old = paths.config_dir / "approvals"
    shutil.copytree(reference, old)
    migration = migrate_approvals(paths)
    assert migration.left == ()
    assert sorted(target for _source, target in migration.moved) == [
        paths.global_decisions,
        paths.project_decisions("my-api"),
    ]
    assert not old.exists()
    assert paths.global_decisions.read_bytes() == (reference / "global.yaml").read_bytes()
    assert paths.global_decisions.stat().st_mode & 0o777 == 0o600
    assert [e.target for e in load_decision_file(paths.project_decisions("my-api")).allow] == [
        "project.dev",
        "*.internal.corp",
    ]
    assert migrate_approvals(paths) == Migration()  # nothing left to do


def test_a_decision_file_already_there_is_never_replaced(paths: CloisterPaths) -> None:
    old = paths.config_dir / "approvals"
    (old / "projects").mkdir(parents=True)
    (old / "global.yaml").write_text("proxy:\n  allow:\n    - domain: old.test\n")
    (old / "projects" / "p.yaml").write_text("proxy:\n  deny:\n    - domain: bad.test\n")
    paths.global_decisions.parent.mkdir(parents=True)
    paths.global_decisions.write_text("allow:\n  - domain: new.test\n", encoding="utf-8")
    migration = migrate_approvals(paths)
    assert migration.left == ((old / "global.yaml", paths.global_decisions),)
    assert migration.moved == ((old / "projects" / "p.yaml", paths.project_decisions("p")),)
    assert paths.global_decisions.read_text(encoding="utf-8") == "allow:\n  - domain: new.test\n"
    assert (old / "global.yaml").exists()  # for the human to merge
    assert not (old / "projects").exists()
