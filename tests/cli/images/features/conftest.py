"""A fake registry and Feature folders for the Feature tests."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.registry import FakeRegistry


@pytest.fixture
def registry() -> Iterator[FakeRegistry]:
    with FakeRegistry() as served:
        yield served


def make_feature(
    folder: Path,
    feature_id: str,
    *,
    script: str = "#!/bin/sh\necho installed\n",
    **metadata: object,
) -> Path:
    """A Feature folder: devcontainer-feature.json (id, version, *metadata*) and install.sh."""
    folder.mkdir(parents=True, exist_ok=True)
    document = {"id": feature_id, "version": "1.0.0", "name": feature_id, **metadata}
    (folder / "devcontainer-feature.json").write_text(json.dumps(document, indent=2))
    (folder / "install.sh").write_text(script)
    (folder / "install.sh").chmod(0o755)
    return folder
