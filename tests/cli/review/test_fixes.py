"""``apply_fixes``: moved aside, never deleted; and afterwards the human's git runs nothing."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from cloister_cli.review import Finding, Fix, apply_fixes, new_findings
from tests.cli.review.conftest import Project, init_repo, of_kind
from tests.git_support import blob, forge_index

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
    assert {item.kind for item in found} == {"nested-repository", "gitlink-without-gitmodules"}
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

    after = project.review()
    assert [item for item in after if item.fix is not None] == []
    assert [(item.kind, item.severity) for item in after] == [
        ("gitlink-without-gitmodules", "review")  # the index entry: `git rm --cached`
    ]


def test_remove_unlinks_links_and_fifos_only(project: Project, tmp_path: Path) -> None:
    secret = project.outside / "secret"
    secret.write_text("the human's\n", encoding="utf-8")
    project.link(".git/packed-refs", secret)
    os.mkfifo(project.root / ".git" / "pipe")
    project.write(".git/objects/info/alternates", f"{project.outside}\n")
    found = project.review()
    removals = [item for item in found if item.fix is not None and item.fix.action == "remove"]
    assert sorted(item.path for item in removals) == [".git/packed-refs", ".git/pipe"]

    lines = apply_fixes(found, tmp_path / "quarantine", within=[project.root])

    directory = _only_directory(tmp_path / "quarantine")
    assert sorted(lines) == [
        f"moved .git/objects/info/alternates to {directory / '.git/objects/info/alternates'}",
        "removed .git/packed-refs (a symbolic link to " + str(secret) + ")",
        "removed .git/pipe (a FIFO)",
    ]
    assert not os.path.lexists(project.root / ".git" / "packed-refs")
    assert not os.path.lexists(project.root / ".git" / "pipe")
    assert secret.read_text(encoding="utf-8") == "the human's\n"  # never followed
    manifest = json.loads((directory / "MANIFEST.json").read_text(encoding="utf-8"))
    by_original = {entry["original"]: entry for entry in manifest}
    link_entry = by_original[str(project.root / ".git" / "packed-refs")]
    assert link_entry == {
        "original": str(project.root / ".git" / "packed-refs"),
        "action": "remove",
        "moved_to": None,
        "kind": "git-dir-link",
        "link_target": str(secret),
    }
    assert not (directory / ".git" / "packed-refs").exists()  # removed, not kept
    assert [item for item in project.review() if item.fix is not None] == []
    assert project.human_git("status").returncode == 0


def test_remove_skips_what_is_no_longer_a_link(project: Project, tmp_path: Path) -> None:
    project.link(".git/FETCH_HEAD", project.outside / "x")
    (finding,) = of_kind(project.review(), "git-dir-link")
    link = project.root / ".git" / "FETCH_HEAD"
    link.unlink()
    link.write_text("real data\n", encoding="utf-8")  # swapped after the review

    lines = apply_fixes([finding], tmp_path / "quarantine", within=[project.root])

    assert lines == ["skipped .git/FETCH_HEAD: it is no longer a symbolic link or FIFO"]
    assert link.read_text(encoding="utf-8") == "real data\n"
    assert not (tmp_path / "quarantine").exists()  # nothing done, no directory


def test_remove_refuses_a_fix_aimed_at_a_regular_file(project: Project, tmp_path: Path) -> None:
    readme = project.root / "README"
    forged = Finding(
        "git-dir-link",
        "README",
        "review",
        "forged",
        (),
        "x",
        Fix("remove", readme, "remove README", "README"),
    )
    assert apply_fixes([forged], tmp_path / "q", within=[project.root]) == [
        "skipped README: it is no longer a symbolic link or FIFO"
    ]
    assert readme.read_text(encoding="utf-8") == "hello\n"


def test_each_call_makes_its_own_directory(project: Project, tmp_path: Path) -> None:
    quarantine = tmp_path / "quarantine"
    project.write(".git/info/exclude", "a\n")
    apply_fixes(project.review(), quarantine, within=[project.root])
    project.write(".git/info/exclude", "b\n")
    apply_fixes(project.review(), quarantine, within=[project.root])
    first, second = sorted(quarantine.iterdir())
    assert first != second
    for directory, content in ((first, "a\n"), (second, "b\n")):
        assert (directory / ".git/info/exclude").read_text(encoding="utf-8") == content
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


def test_a_forged_index_is_rebuilt(project: Project, tmp_path: Path) -> None:
    readme = blob(project.root, "hello\n")
    forge_index(project.root, [(0o100644, readme, "README"), (0o100755, readme, "../victim")])
    (finding,) = of_kind(project.review(), "index-entry")
    lines = apply_fixes([finding], tmp_path / "q", within=[project.root])
    assert len(lines) == 1
    assert "rebuilt it from HEAD" in lines[0]
    assert project.git("ls-files") == "README"
    project.human_git("restore", ".")
    assert not (project.root.parent / "victim").exists()
    assert list((tmp_path / "q").glob("*/.git/index"))


def test_a_gitlink_outside_the_project_is_never_a_fix_target(
    project: Project, tmp_path: Path
) -> None:
    """The agent chooses what an index entry names: `../human/repo` is not ours to move."""
    human = init_repo(project.outside / "repo")
    head = project.git("rev-parse", "HEAD")
    forge_index(project.root, [(0o160000, head, "../outside/repo")])
    found = project.review()
    assert [item.kind for item in found if item.fix is not None] == ["index-entry"]
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
