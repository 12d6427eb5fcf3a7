"""Stored agent credentials: 0600 files outside every mounted directory, never shown."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from cloister_core.credentials import (
    PROVIDERS,
    CredentialError,
    client_token,
    credential_file,
    listing,
    load,
    provider_of,
    remove,
    store,
)
from cloister_core.paths import CloisterPaths


@pytest.fixture
def paths(tmp_path: Path) -> CloisterPaths:
    return CloisterPaths(config_dir=tmp_path / "config", data_dir=tmp_path / "data")


def test_store_writes_a_private_file_in_a_private_directory(paths: CloisterPaths) -> None:
    path = store(paths, "claude", "api-key", "sk-ant-secret")
    assert path == paths.data_dir / "credentials" / "claude.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert not path.is_relative_to(paths.config_dir)  # the config dir is mounted everywhere
    assert json.loads(path.read_text())["secret"] == "sk-ant-secret"
    record = load(paths, "claude")
    assert record is not None
    assert record.method == "api-key"
    assert record.secret is not None
    assert record.secret.get_secret_value() == "sk-ant-secret"


def test_the_secret_is_masked_everywhere_but_the_file(paths: CloisterPaths) -> None:
    store(paths, "codex", "oauth-token", "tok-very-secret")
    record = load(paths, "codex")
    assert "tok-very-secret" not in repr(record)
    assert "tok-very-secret" not in str(record)
    assert "tok-very-secret" not in str(record.model_dump() if record else "")


def test_existing_login_needs_no_secret_the_others_do(paths: CloisterPaths) -> None:
    store(paths, "gemini", "existing-login", None)
    record = load(paths, "gemini")
    assert record is not None
    assert (record.method, record.secret) == ("existing-login", None)
    with pytest.raises(CredentialError, match="api-key method needs a secret"):
        store(paths, "claude", "api-key", "")


def test_listing_remove_and_unknown_agents(paths: CloisterPaths) -> None:
    assert listing(paths) == {"claude": None, "codex": None, "gemini": None}
    store(paths, "claude", "api-key", "k")
    assert listing(paths)["claude"] == "api-key"
    assert remove(paths, "claude") is True
    assert remove(paths, "claude") is False
    assert load(paths, "claude") is None
    with pytest.raises(CredentialError, match="no such agent: 'aider'"):
        credential_file(paths, "aider")


def test_a_broken_file_is_a_clear_error(paths: CloisterPaths) -> None:
    path = store(paths, "claude", "api-key", "k")
    path.write_text("{not json")
    with pytest.raises(CredentialError, match="cannot read the credential"):
        load(paths, "claude")
    path.write_text('{"agent": "claude"}')
    with pytest.raises(CredentialError, match="not a credential"):
        load(paths, "claude")
    assert listing(paths)["claude"] is None


@pytest.mark.parametrize(
    ("path", "agent", "rest"),
    [
        ("/claude/v1/messages", "claude", "/v1/messages"),
        ("/claude", "claude", "/"),
        ("/codex/v1/responses", "codex", "/v1/responses"),
        ("/gemini/v1beta/models/x:generateContent", "gemini", "/v1beta/models/x:generateContent"),
    ],
)
def test_provider_of(path: str, agent: str, rest: str) -> None:
    found = provider_of(path)
    assert found is not None
    assert (found[0].agent, found[1]) == (agent, rest)


@pytest.mark.parametrize("path", ["/", "/claudex", "/v1/messages", "claude/v1"])
def test_provider_of_nothing(path: str) -> None:
    assert provider_of(path) is None


def test_client_token_reads_each_providers_headers() -> None:
    claude = PROVIDERS["claude"]
    assert client_token(claude, {"x-api-key": "t1"}) == "t1"
    assert client_token(claude, {"authorization": "Bearer t2"}) == "t2"
    assert client_token(PROVIDERS["codex"], {"x-api-key": "t1"}) is None
    assert client_token(PROVIDERS["gemini"], {"x-goog-api-key": "t3"}) == "t3"


def test_secrets_are_never_stored_where_every_service_can_read_them(tmp_path: Path) -> None:
    inside = CloisterPaths(config_dir=tmp_path / "config", data_dir=tmp_path / "config" / "data")
    with pytest.raises(CredentialError, match="inside the config directory"):
        store(inside, "claude", "api-key", "k")
    assert not (tmp_path / "config" / "data" / "credentials").exists()
