"""devcontainer-lock.json: where it is, reading it (the agent's file), writing it as the CLI."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from cloister_core.devcontainer import (
    FeatureError,
    LockEntry,
    lock_path_for,
    read_lock,
    render_lock,
)

LOCKS = Path(__file__).parent / "fixtures" / "features" / "lock"
DIGEST = "sha256:" + "0123456789abcdef" * 4


def test_lock_path_for() -> None:
    assert lock_path_for(Path("/p/.devcontainer/devcontainer.json")) == Path(
        "/p/.devcontainer/devcontainer-lock.json"
    )
    assert lock_path_for(Path("/p/.devcontainer/cloister/devcontainer.json")) == Path(
        "/p/.devcontainer/cloister/devcontainer-lock.json"
    )
    assert lock_path_for(Path("/p/.devcontainer.json")) == Path("/p/.devcontainer-lock.json")


@pytest.mark.parametrize("name", ["cli.devcontainer-lock.json", "dependson.devcontainer-lock.json"])
def test_the_clis_own_lock_files_round_trip(name: str) -> None:
    path = LOCKS / name
    lock = read_lock(path)
    assert lock.exists
    assert render_lock(lock.entries) == path.read_text()


def test_read_lock_entries() -> None:
    lock = read_lock(LOCKS / "dependson.devcontainer-lock.json")
    entry = lock.entries["ghcr.io/codspace/dependson/A:2"]
    assert entry.version == "2.0.1"
    assert entry.integrity == (
        "sha256:932027ef71da186210e6ceb3294c3459caaf6b548d2b547d5d26be3fc4b2264a"
    )
    assert entry.resolved == "ghcr.io/codspace/dependson/a@" + entry.integrity
    assert entry.depends_on == ("ghcr.io/codspace/dependson/E",)


def test_render_sorts_ids_as_the_cli_does() -> None:
    entry = LockEntry("1.0.0", f"ghcr.io/x/y@{DIGEST}", DIGEST)
    text = render_lock({"ghcr.io/x/b:1": entry, "ghcr.io/x/B:2": entry, "ghcr.io/x/a": entry})
    assert text.startswith('{\n  "features": {\n    "ghcr.io/x/a": {\n      "version": "1.0.0",')
    assert text.endswith("}\n")
    ids = list(json.loads(text)["features"])
    assert ids == ["ghcr.io/x/a", "ghcr.io/x/b:1", "ghcr.io/x/B:2"]  # lower case first


def test_missing_and_empty_files(tmp_path: Path) -> None:
    missing = read_lock(tmp_path / "devcontainer-lock.json")
    assert (missing.exists, dict(missing.entries)) == (False, {})
    (tmp_path / "devcontainer-lock.json").write_text("  \n")
    empty = read_lock(tmp_path / "devcontainer-lock.json")  # the spec's "please write one"
    assert (empty.exists, dict(empty.entries)) == (True, {})


def test_round_trip(tmp_path: Path) -> None:
    entries = {
        "ghcr.io/devcontainers/features/node:1": LockEntry(
            "1.6.1", f"ghcr.io/devcontainers/features/node@{DIGEST}", DIGEST
        ),
        "localhost:5000/a/b": LockEntry("0.1.0", f"localhost:5000/a/b@{DIGEST}", DIGEST, ("x",)),
    }
    path = tmp_path / "devcontainer-lock.json"
    path.write_text(render_lock(entries))
    assert read_lock(path).entries == entries


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("[]", ':1:1: expected {"features": {…}}'),
        ('{"features": []}', ":1:2: features: expected an object"),
        ('{"features": {\n  "a": 1}}', ":2:3: features['a']: expected an object"),
        (
            '{"features": {\n  "a": {"version": "1", "resolved": "x@' + DIGEST + '"}}}',
            ":2:3: features['a'].integrity: expected a string",
        ),
        (
            '{"features": {"a": {\n "version": "1", "resolved": "r@sha256:ab",'
            ' "integrity": "sha256:ab"}}}',
            "is not sha256:<64 hex digits>",
        ),
        (
            '{"features": {"a": {"version": "1", "resolved": "ghcr.io/x/other@sha256:'
            + "f" * 64
            + '", "integrity": "'
            + DIGEST
            + '"}}}',
            "does not end in @" + DIGEST,
        ),
        (
            '{"features": {"a": {"version": "1", "resolved": "x@'
            + DIGEST
            + '", "integrity": "'
            + DIGEST
            + '",\n "dependsOn": "b"}}}',
            ":2:2: features['a'].dependsOn: expected a list of strings",
        ),
        ('{"features": {', "invalid JSON"),
    ],
)
def test_errors_name_the_file_and_line(tmp_path: Path, text: str, error: str) -> None:
    path = tmp_path / "devcontainer-lock.json"
    path.write_text(text)
    with pytest.raises(FeatureError) as caught:
        read_lock(path)
    assert str(caught.value).startswith(str(path))
    assert error in str(caught.value)


def test_a_link_or_a_fifo_is_not_read(tmp_path: Path) -> None:
    secret = tmp_path / "secret.json"
    secret.write_text('{"features": {}}')
    link = tmp_path / "devcontainer-lock.json"
    link.symlink_to(secret)
    with pytest.raises(FeatureError, match="symbolic link"):
        read_lock(link)
    fifo = tmp_path / "fifo" / "devcontainer-lock.json"
    fifo.parent.mkdir()
    os.mkfifo(fifo)
    with pytest.raises(FeatureError, match="not a regular file"):
        read_lock(fifo)


def test_an_oversized_lock_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "devcontainer-lock.json"
    path.write_text('{"features": {}, "pad": "' + "a" * (1024 * 1024) + '"}')
    with pytest.raises(FeatureError, match="the lock file over 1 MiB is refused"):
        read_lock(path)
