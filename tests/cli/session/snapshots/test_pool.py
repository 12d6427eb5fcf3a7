"""Object files placed between a repository and the pool: only regular files, no link
followed, each method giving the same bytes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cloister_cli.session.snapshots.pool import Placer, object_files, prune, transfer

PACK = "pack-" + "1" * 40
LOOSE = "ab/" + "c" * 38


def objects_dir(root: Path) -> Path:
    objects = root / "objects"
    (objects / "pack").mkdir(parents=True)
    (objects / "ab").mkdir()
    (objects / "pack" / f"{PACK}.pack").write_bytes(b"PACK data")
    (objects / "pack" / f"{PACK}.idx").write_bytes(b"index")
    (objects / LOOSE).write_bytes(b"loose")
    return objects


def test_only_complete_object_files_are_listed(tmp_path: Path) -> None:
    objects = objects_dir(tmp_path)
    half = "pack-" + "2" * 40
    (objects / "pack" / f"{half}.pack").write_bytes(b"being written: no index yet")
    (objects / "pack" / "tmp_pack_XYZ").write_bytes(b"")
    (objects / "info").mkdir()
    (objects / "info" / "packs").write_text("P x\n", encoding="utf-8")
    (objects / "ab" / "tmp_obj_1").write_bytes(b"")
    assert object_files(objects) == [LOOSE, f"pack/{PACK}.idx", f"pack/{PACK}.pack"]


def test_links_and_fifos_planted_by_the_agent_are_not_taken(tmp_path: Path) -> None:
    objects = objects_dir(tmp_path)
    secret = tmp_path / "id_ed25519"
    secret.write_text("the human's key\n", encoding="utf-8")
    planted = "pack-" + "3" * 40
    (objects / "pack" / f"{planted}.pack").symlink_to(secret)
    (objects / "pack" / f"{planted}.idx").symlink_to(secret)
    os.mkfifo(objects / "ab" / ("d" * 38))
    (objects / "cd").symlink_to(tmp_path)  # a directory link
    names = object_files(objects)
    assert all("3" * 40 not in name and "d" * 38 not in name for name in names)
    pool = tmp_path / "pool"
    # Even when asked for them by name (a forged record): nothing but regular files.
    wanted = [*names, f"pack/{planted}.pack", "ab/" + "d" * 38, "cd/" + "e" * 38]
    placed = transfer(objects, pool, wanted, Placer())
    assert sorted(placed) == sorted(names)
    assert not any(path.is_symlink() for path in pool.rglob("*"))
    contents = [path.read_bytes() for path in pool.rglob("*") if path.is_file()]
    assert not any(b"the human's key" in content for content in contents)


@pytest.mark.parametrize("methods", [set(), {"reflink"}, {"reflink", "hardlink"}])
def test_every_method_gives_the_same_bytes(tmp_path: Path, methods: set[str]) -> None:
    objects = objects_dir(tmp_path)
    placer = Placer(unsupported=set(methods))  # type: ignore[arg-type]
    pool = tmp_path / "pool"
    transfer(objects, pool, object_files(objects), placer)
    assert (pool / "pack" / f"{PACK}.pack").read_bytes() == b"PACK data"
    assert (pool / LOOSE).read_bytes() == b"loose"
    if "hardlink" in methods:
        assert placer.used == {"copy": 3}
        assert (pool / LOOSE).stat().st_ino != (objects / LOOSE).stat().st_ino
    # Deleting the repository's files (what `git gc --prune` or `rm -rf .git` do) leaves
    # the pool's intact, whichever way they were placed.
    for name in object_files(objects):
        (objects / name).unlink()
    assert (pool / LOOSE).read_bytes() == b"loose"


def test_a_link_in_the_target_is_replaced_not_followed(tmp_path: Path) -> None:
    objects = objects_dir(tmp_path)
    target = tmp_path / "repo-objects"
    target.mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (target / "pack").symlink_to(elsewhere)
    (target / "ab").mkdir()
    (target / LOOSE).symlink_to(tmp_path / "somewhere")
    transfer(objects, target, object_files(objects), Placer())
    assert list(elsewhere.iterdir()) == []
    assert not (target / "pack").is_symlink()
    assert (target / LOOSE).read_bytes() == b"loose"
    assert not (target / LOOSE).is_symlink()


def test_prune_removes_only_what_is_not_needed(tmp_path: Path) -> None:
    objects = objects_dir(tmp_path)
    removed = prune(objects, {LOOSE})
    assert removed == 2
    assert object_files(objects) == [LOOSE]
    assert prune(tmp_path / "missing", set()) == 0
