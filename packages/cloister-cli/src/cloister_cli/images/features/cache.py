"""Fetched Features on this machine: ``<data>/cache/features/sha256-<hex>/``.

Each entry is named by its manifest's digest and holds ``manifest.json`` and the
layer extracted into ``feature/``. A tarball is hostile (whoever publishes a Feature
wrote it): no links, no devices, nothing outside the folder (tarfile's ``data`` filter
besides), bounded in entries and size. An entry is extracted into a temporary directory
beside it and renamed into place, so a concurrent start sees a whole entry or none, and
a cached digest is never fetched again.
"""

from __future__ import annotations

import contextlib
import io
import tarfile
import tempfile
from pathlib import Path

from cloister_cli.images.features.oci import FeatureFetchError, Fetched
from cloister_core import beneath
from cloister_core.paths import CloisterPaths
from cloister_core.printable import printable

MAX_ENTRIES = 10_000
MAX_EXTRACTED = 256 * 1024 * 1024  # bytes over all files of one Feature
FOLDER = "feature"
MANIFEST = "manifest.json"


def features_dir(paths: CloisterPaths) -> Path:
    return paths.data_dir / "cache" / "features"


def entry_dir(paths: CloisterPaths, digest: str) -> Path:
    algorithm, _, hexdigest = digest.partition(":")
    if algorithm != "sha256" or len(hexdigest) != 64 or not hexdigest.isalnum():
        raise FeatureFetchError(f"{digest!r} is no sha256 digest")
    return features_dir(paths) / f"sha256-{hexdigest}"


def cached(paths: CloisterPaths, digest: str) -> Path | None:
    """The extracted folder of manifest *digest*, if it is in the cache."""
    folder = entry_dir(paths, digest) / FOLDER
    return folder if folder.is_dir() else None


def store(paths: CloisterPaths, fetched: Fetched) -> Path:
    """*fetched* extracted into the cache (its folder); kept as it is if already there."""
    entry = entry_dir(paths, fetched.digest)
    if (entry / FOLDER).is_dir():
        return entry / FOLDER
    entry.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    temporary = Path(tempfile.mkdtemp(prefix=".fetch-", dir=entry.parent))
    try:
        (temporary / MANIFEST).write_bytes(fetched.manifest)
        extract(fetched.layer, temporary / FOLDER, what=fetched.reference.resource)
        try:
            temporary.rename(entry)
        except OSError:
            if (entry / FOLDER).is_dir():  # a concurrent start's whole entry: that one
                return entry / FOLDER
            # Entries are made whole by a rename: this one was damaged; replaced.
            beneath.remove_tree(entry)
            temporary.rename(entry)
    finally:
        with contextlib.suppress(FileNotFoundError):
            beneath.remove_tree(temporary)
    return entry / FOLDER


def extract(layer: bytes, destination: Path, *, what: str) -> None:
    """The Feature tarball *layer* into *destination* (made here), refusing what is hostile."""
    try:
        archive = tarfile.open(fileobj=io.BytesIO(layer), mode="r:*")  # noqa: SIM115 - closed below
    except tarfile.TarError as error:
        raise _refused(what, f"it is no tar ({error})") from None
    with archive:
        members = []
        total = 0
        for member in archive:
            members.append(member)
            if len(members) > MAX_ENTRIES:
                raise _refused(what, f"more than {MAX_ENTRIES} entries")
            name = member.name
            if member.issym() or member.islnk():
                raise _refused(what, f"{name!r} is a link")
            if not (member.isfile() or member.isdir()):
                raise _refused(what, f"{name!r} is neither a file nor a directory")
            parts = Path(name).parts
            if name.startswith("/") or ".." in parts:
                raise _refused(what, f"{name!r} points outside the Feature's folder")
            total += member.size
            if total > MAX_EXTRACTED:
                raise _refused(what, f"it holds more than {MAX_EXTRACTED} bytes")
        destination.mkdir(mode=0o755)
        try:
            archive.extractall(destination, members=members, filter="data")
        except (tarfile.TarError, OSError) as error:
            raise _refused(what, str(error)) from None


def _refused(what: str, why: str) -> FeatureFetchError:
    return FeatureFetchError(f"Feature {printable(what)}: its tarball is refused: {printable(why)}")
