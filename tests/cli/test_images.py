"""Image fingerprints: an image built from another version of the tree is rebuilt."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from cloister_cli.images import (
    PROXY_IMAGE,
    SLIM_AGENT_IMAGE,
    SOURCE_LABEL,
    is_current,
    source_fingerprint,
)
from tests.fake_engine import FakeEngine

REPOSITORY = Path(__file__).resolve().parents[2]


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A copy of what the proxy and slim images are built from."""
    copy = tmp_path / "tree"
    for relative in (
        "uv.lock",
        PROXY_IMAGE.dockerfile,
        SLIM_AGENT_IMAGE.dockerfile,
        "services/healthcheck.py",
        "images/hostexec/hostexec",
    ):
        (copy / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPOSITORY / relative, copy / relative)
    for package in ("cloister-core", "cloister-proxy"):
        source, target = REPOSITORY / "packages" / package, copy / "packages" / package
        target.mkdir(parents=True)
        shutil.copy2(source / "pyproject.toml", target / "pyproject.toml")
        shutil.copytree(
            source / "src", target / "src", ignore=shutil.ignore_patterns("__pycache__")
        )
    return copy


def test_the_fingerprint_follows_the_sources(tree: Path) -> None:
    first = source_fingerprint(tree, PROXY_IMAGE)
    assert source_fingerprint(tree, PROXY_IMAGE) == first
    cache = tree / "packages" / "cloister-proxy" / "src" / "cloister_proxy" / "__pycache__"
    cache.mkdir()
    (cache / "relay.cpython-311.pyc").write_bytes(b"compiled")
    assert source_fingerprint(tree, PROXY_IMAGE) == first  # not a source

    relay = tree / "packages" / "cloister-proxy" / "src" / "cloister_proxy" / "relay.py"
    relay.write_text(relay.read_text(encoding="utf-8") + "\n# changed\n", encoding="utf-8")
    second = source_fingerprint(tree, PROXY_IMAGE)
    assert second != first
    core = tree / "packages" / "cloister-core" / "src" / "cloister_core" / "rules.py"
    core.write_text(core.read_text(encoding="utf-8") + "\n# changed\n", encoding="utf-8")
    assert source_fingerprint(tree, PROXY_IMAGE) != second  # the core is in every image


def test_an_agent_image_depends_on_its_dockerfile_and_hostexec_only(tree: Path) -> None:
    first = source_fingerprint(tree, SLIM_AGENT_IMAGE)
    (tree / "uv.lock").write_text("changed\n", encoding="utf-8")
    assert source_fingerprint(tree, SLIM_AGENT_IMAGE) == first
    hostexec = tree / "images" / "hostexec" / "hostexec"
    hostexec.write_text(hostexec.read_text(encoding="utf-8") + "# changed\n", encoding="utf-8")
    assert source_fingerprint(tree, SLIM_AGENT_IMAGE) != first


@pytest.mark.parametrize(
    ("labels", "fingerprint", "current"),
    [
        ({SOURCE_LABEL: "abc"}, "abc", True),
        ({SOURCE_LABEL: "abc"}, "def", False),  # built from another tree
        (None, "abc", False),  # built before images had the label
        (None, None, True),  # no source tree to compare with: present is enough
    ],
)
def test_is_current(labels: dict[str, str] | None, fingerprint: str | None, current: bool) -> None:
    engine = FakeEngine()
    engine.add_image("x:latest", labels=labels)
    assert is_current(engine.client, "x:latest", fingerprint) is current


def test_a_missing_image_is_never_current() -> None:
    assert is_current(FakeEngine().client, "x:latest", None) is False
