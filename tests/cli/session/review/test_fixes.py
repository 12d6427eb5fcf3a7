"""``apply_fixes``: moved aside, never deleted; and afterwards the human's git runs nothing."""

from __future__ import annotations

import json
import re
from pathlib import Path

from cloister_cli.session.review import (
    Finding,
    Fix,
    ReviewTarget,
    apply_fixes,
    new_findings,
    review,
)
from tests.cli.session.review.conftest import Project, init_repo, of_kind

STAMP = re.compile(r"^\d{8}T\d{6}Z(-\d+)?$")


def _plant_fsmonitor(project: Project, marker: Path) -> None:
    """A gitlinked repository whose fsmonitor touches *marker*: the README's attack."""
    project.nested("sub", ("core.fsmonitor", f"touch {marker}; false"))
    project.git("add", "sub")


def _only_directory(quarantine: Path) -> Path:
    (directory,) = quarantine.iterdir()
    assert STAMP.match(directory.name)
    return directory


def test_quarantine_stops_the_humans_git_running_the_plant(
    project: Project, tmp_path: Path
) -> None:
    baseline = {item.fingerprint for item in project.review()}
    marker = tmp_path / "marker"
    _plant_fsmonitor(project, marker)

    project.human_git("status")  # what the human's git does before the fix
    assert marker.exists()
    marker.unlink()

    found = new_findings(project.review(), baseline)
    assert [item.kind for item in found] == ["nested-repository"]
    assert "your git in the project enters it: it is a gitlink in the index" in found[0].summary
    quarantine = tmp_path / "quarantine"
    lines = apply_fixes(found, quarantine, within=[project.root])

    directory = _only_directory(quarantine)
    assert lines == [f"moved sub/.git to {directory / 'sub' / '.git'}"]  # one fix, done once
    assert not (project.root / "sub" / ".git").exists()
    moved = directory / "sub" / ".git"
    assert "touch" in (moved / "config").read_text(encoding="utf-8")  # data intact
    assert (moved / "HEAD").is_file()
    manifest = json.loads((directory / "MANIFEST.json").read_text(encoding="utf-8"))
    assert manifest == [
        {
            "original": str(project.root / "sub" / ".git"),
            "action": "quarantine",
            "moved_to": str(moved),
            "kind": found[0].kind,
            "link_target": None,
        }
    ]

    for args in (("status",), ("add", "-A"), ("diff",)):
        project.human_git(*args)
        assert not marker.exists(), args

    assert project.review() == []


def test_each_call_makes_its_own_directory(project: Project, tmp_path: Path) -> None:
    quarantine = tmp_path / "quarantine"
    for pager in ("a", "b"):
        project.nested("sub", ("core.pager", pager))
        apply_fixes(project.review(), quarantine, within=[project.root])
    first, second = sorted(quarantine.iterdir())
    assert first != second
    for directory, pager in ((first, "a"), (second, "b")):
        config = (directory / "sub/.git/config").read_text(encoding="utf-8")
        assert f"pager = {pager}" in config
        assert (directory / "MANIFEST.json").is_file()


def test_nothing_to_fix(project: Project, tmp_path: Path) -> None:
    project.write(".envrc", "echo hi\n")
    assert apply_fixes(project.review(), tmp_path / "quarantine", within=[project.root]) == []
    assert not (tmp_path / "quarantine").exists()


def test_a_vanished_target_is_skipped(project: Project, tmp_path: Path) -> None:
    project.nested("sub", ("core.pager", "evil"))
    found = project.review()
    (project.root / "sub" / ".git").rename(tmp_path / "elsewhere")
    assert apply_fixes(found, tmp_path / "q", within=[project.root]) == [
        "skipped sub/.git: it is no longer there"
    ]


def test_a_symlinked_dotgit_is_moved_as_a_link(project: Project, tmp_path: Path) -> None:
    real = project.outside / "repo"
    real.mkdir()
    project.link("sub/.git", real)
    (finding,) = of_kind(project.review(), "nested-repository")
    assert finding.severity == "reads-outside"
    apply_fixes([finding], tmp_path / "q", within=[project.root])
    directory = _only_directory(tmp_path / "q")
    assert (directory / "sub" / ".git").is_symlink()
    assert real.is_dir()  # the link moved, its target untouched
    manifest = json.loads((directory / "MANIFEST.json").read_text(encoding="utf-8"))
    assert manifest[0]["link_target"] == str(real)


def test_a_target_outside_the_project_is_never_moved(project: Project, tmp_path: Path) -> None:
    """Whatever a finding names, a repository outside the work tree is not ours to move."""
    human = init_repo(project.outside / "repo")
    forged = Finding(
        "nested-repository",
        "../outside/repo/",
        "runs-code",
        "forged",
        (),
        "x",
        Fix("quarantine", human / ".git", "move it", "outside/repo/.git"),
    )
    assert apply_fixes([forged], tmp_path / "q", within=[project.root]) == [
        "skipped outside/repo/.git: it is not inside the project"
    ]
    assert (human / ".git").is_dir()


def test_a_directory_swapped_for_a_link_is_not_crossed(project: Project, tmp_path: Path) -> None:
    """Between review and fix the agent's tree may change: a link on the way is not taken."""
    project.nested("a/sub", ("core.pager", "evil"))
    found = project.review()
    elsewhere = project.outside / "a"
    (project.root / "a").rename(elsewhere)
    project.link("a", elsewhere)
    assert apply_fixes(found, tmp_path / "q", within=[project.root]) == [
        "skipped a/sub/.git: it is not inside the project"
    ]
    assert (elsewhere / "sub" / ".git").is_dir()


def test_a_repository_at_the_top_of_a_project_without_git(tmp_path: Path) -> None:
    """Without git of the human's, a .git at the top is the agent's: it is moved away."""
    tree = tmp_path / "notes"
    init_repo(tree)
    (tree / ".git" / "config").write_text("[core]\n\tfsmonitor = touch x\n", encoding="utf-8")
    found = review(ReviewTarget(tree, None, None))
    assert [(item.kind, item.path, item.severity) for item in found] == [
        ("nested-repository", "./", "runs-code")
    ]
    lines = apply_fixes(found, tmp_path / "q", within=[tree])
    assert lines == [f"moved .git to {_only_directory(tmp_path / 'q') / '.git'}"]
    assert not (tree / ".git").exists()
