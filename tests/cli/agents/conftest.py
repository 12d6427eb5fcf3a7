"""Fixtures of the agent tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli.agents.hosthome import make_host_home


@pytest.fixture
def host_home(tmp_path: Path) -> Path:
    """A human's home holding config, history, transcripts, logins, hooks and MCP servers."""
    return make_host_home(tmp_path / "host-home")
