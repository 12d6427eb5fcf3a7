"""Which of the guardian's images are missing or stale: no Docker engine (a fake)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import cast

import docker

from cloister_cli.images.builds import SOURCE_LABEL, source_fingerprint
from cloister_cli.stack.guardian import Guardian
from cloister_core.config.models import GlobalConfig
from cloister_core.paths import CloisterPaths
from cloister_core.stack import Instance
from tests.fake_engine import FakeEngine

SOURCE = Path(__file__).resolve().parents[3]


def _guardian(tmp_path: Path, engine: FakeEngine) -> Guardian:
    paths = CloisterPaths(config_dir=tmp_path / "config", data_dir=tmp_path / "data")
    client = cast(docker.DockerClient, engine)
    return Guardian(paths, GlobalConfig(), client, SOURCE, Instance.of(paths, os.getuid()))


def test_stale_images_are_the_missing_and_the_ones_of_another_source(tmp_path: Path) -> None:
    engine = FakeEngine()
    guardian = _guardian(tmp_path, engine)
    tags = guardian.tags
    for spec, tag in tags.specs():
        if tag != tags.proxy:  # the proxy's is missing
            engine.add_image(tag, labels={SOURCE_LABEL: source_fingerprint(SOURCE, spec)})
    assert [tag for _, tag in guardian.stale_images()] == [tags.proxy]
    assert guardian.stale_images(git_only=True) == []
    engine.add_image(tags.git, labels={SOURCE_LABEL: "built from another source"})
    assert [tag for _, tag in guardian.stale_images()] == [tags.proxy, tags.git]
    engine.calls.clear()
    assert [tag for _, tag in guardian.stale_images(git_only=True)] == [tags.git]
    # Only the git image is asked about (and fingerprinted).
    assert engine.calls == [("images.get", {"name": tags.git})]
