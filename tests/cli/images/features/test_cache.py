"""The Feature cache: entries by digest, extracted as hostile tarballs, atomically."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from cloister_cli.images.features import cache
from cloister_cli.images.features.oci import FeatureFetchError, Fetched, Reference
from cloister_core.paths import CloisterPaths
from tests.registry import feature_tar, sha256


def _paths(tmp_path: Path) -> CloisterPaths:
    return CloisterPaths(config_dir=tmp_path / "config", data_dir=tmp_path / "data")


def _fetched(layer: bytes) -> Fetched:
    manifest = b'{"layers": []}' + layer[:8]
    return Fetched(Reference.parse("127.0.0.1:1/f/x:1"), sha256(manifest), manifest, layer, None)


def _tar(*members: tuple[tarfile.TarInfo, bytes | None]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for info, data in members:
            if data is not None:
                info.size = len(data)
            archive.addfile(info, io.BytesIO(data) if data is not None else None)
    return buffer.getvalue()


def test_a_fetched_feature_is_stored_by_its_digest_and_found_again(tmp_path: Path) -> None:
    source = tmp_path / "src"
    source.mkdir()
    (source / "install.sh").write_text("#!/bin/sh\n")
    (source / "lib").mkdir()
    (source / "lib" / "a.sh").write_text("a")
    fetched = _fetched(feature_tar(source))
    paths = _paths(tmp_path)
    assert cache.cached(paths, fetched.digest) is None
    folder = cache.store(paths, fetched)
    hexdigest = fetched.digest.removeprefix("sha256:")
    assert folder == paths.data_dir / "cache" / "features" / f"sha256-{hexdigest}" / "feature"
    assert (folder / "install.sh").read_text() == "#!/bin/sh\n"
    assert (folder / "lib" / "a.sh").read_text() == "a"
    assert (folder.parent / "manifest.json").read_bytes() == fetched.manifest
    assert cache.cached(paths, fetched.digest) == folder
    assert cache.store(paths, fetched) == folder  # a second store keeps the first
    assert [p.name for p in folder.parent.parent.iterdir()] == [f"sha256-{hexdigest}"]


def _link(name: str, target: str, kind: bytes = tarfile.SYMTYPE) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, target
    return info


@pytest.mark.parametrize(
    ("members", "why"),
    [
        ([(_link("./x", "/etc/passwd"), None)], "is a link"),
        ([(_link("./x", "install.sh", tarfile.LNKTYPE), None)], "is a link"),
        ([(tarfile.TarInfo("/etc/evil"), b"x")], "outside"),
        ([(tarfile.TarInfo("../evil"), b"x")], "outside"),
        ([(_link("./dev", "", tarfile.CHRTYPE), None)], "neither a file nor a directory"),
    ],
)
def test_a_hostile_tarball_is_refused_and_nothing_is_left(
    tmp_path: Path, members: list[tuple[tarfile.TarInfo, bytes | None]], why: str
) -> None:
    paths = _paths(tmp_path)
    fetched = _fetched(_tar(*members))
    with pytest.raises(FeatureFetchError, match=why):
        cache.store(paths, fetched)
    assert cache.cached(paths, fetched.digest) is None
    assert list(cache.features_dir(paths).iterdir()) == []
    assert not (tmp_path / "evil").exists()


def test_a_tarball_over_the_size_bound_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cache, "MAX_EXTRACTED", 100)
    fetched = _fetched(_tar((tarfile.TarInfo("./big"), b"x" * 101)))
    with pytest.raises(FeatureFetchError, match="more than 100 bytes"):
        cache.store(_paths(tmp_path), fetched)


def test_what_is_no_tar_is_refused(tmp_path: Path) -> None:
    with pytest.raises(FeatureFetchError, match="no tar"):
        cache.store(_paths(tmp_path), _fetched(b"not a tar at all" * 100))


def test_the_cache_gets_no_setuid_file_nor_a_folder_others_may_write(tmp_path: Path) -> None:
    def member(name: str, mode: int, kind: bytes = tarfile.REGTYPE) -> tarfile.TarInfo:
        info = tarfile.TarInfo(name)
        info.mode, info.type = mode, kind
        return info

    layer = _tar(
        (member("open", 0o777, tarfile.DIRTYPE), None),
        (member("open/install.sh", 0o4777), b"#!/bin/sh\n"),
        (member("install.sh", 0o6755), b"#!/bin/sh\n"),
        (member("sticky", 0o1777, tarfile.DIRTYPE), None),
    )
    folder = cache.store(_paths(tmp_path), _fetched(layer))
    modes = {
        path.relative_to(folder).as_posix(): path.stat().st_mode & 0o7777
        for path in folder.rglob("*")
    }
    assert modes == {
        "open": 0o755,
        "open/install.sh": 0o755,
        "install.sh": 0o755,
        "sticky": 0o755,
    }
    assert folder.parent.stat().st_mode & 0o077 == 0  # the entry: the user's only
