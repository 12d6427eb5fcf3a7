"""Tokens: generation, 0600 files, directory loading, constant-time lookup, revoke."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from pydantic import ValidationError

from cloister_core.errors import CloisterNameError, TokenError
from cloister_core.tokens import (
    TokenRecord,
    TokenRegistry,
    generate_token,
    read_token_file,
    remove_token_file,
    remove_tokens_bound_to,
    write_token_file,
)


def record(cloister: str = "my-api", project: str = "my-api") -> TokenRecord:
    return TokenRecord.create(cloister=cloister, project=project, path=Path("/home/me/my-api"))


def test_generate_token_is_32_random_bytes_hex() -> None:
    tokens = {generate_token() for _ in range(100)}
    assert len(tokens) == 100
    assert all(re.fullmatch(r"[0-9a-f]{64}", token) for token in tokens)


def test_record_hides_its_secret() -> None:
    item = record()
    assert item.secret not in repr(item)
    assert item.secret not in str(item)
    assert item.secret not in str(item.model_dump())
    assert json.loads(item.model_dump_json())["token"] == item.secret


def test_write_and_read_token_file(tmp_path: Path) -> None:
    tokens_dir = tmp_path / "tokens"
    item = TokenRecord.create(
        cloister="my-api-feature", project="my-api", branch="feature/x", path=Path("/w/t")
    )
    path = write_token_file(tokens_dir, item)
    assert path == tokens_dir / "my-api-feature"
    assert path.stat().st_mode & 0o777 == 0o600
    assert tokens_dir.stat().st_mode & 0o777 == 0o700
    data = json.loads(path.read_text(encoding="utf-8"))
    assert set(data) == {
        *("token", "cloister", "project", "branch", "path", "created_at", "address")
    }
    assert read_token_file(path) == item
    assert remove_token_file(tokens_dir, "my-api-feature")
    assert not remove_token_file(tokens_dir, "my-api-feature")


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ("not json", "cannot read token file"),
        ('{"token": "abc"}', "invalid token file"),
        (
            '{"token": "' + "A" * 64 + '", "cloister": "x", "project": "x", "path": "/x",'
            ' "created_at": "2026-01-01T00:00:00Z"}',
            "64 lower-case hex",
        ),
        (
            '{"token": "' + "a" * 64 + '", "cloister": "x", "project": "x", "path": "rel",'
            ' "created_at": "2026-01-01T00:00:00Z"}',
            "must be absolute",
        ),
        (
            '{"token": "' + "a" * 64 + '", "cloister": "../x", "project": "x", "path": "/x",'
            ' "created_at": "2026-01-01T00:00:00Z"}',
            "not valid",
        ),
        (
            '{"token": "' + "a" * 64 + '", "cloister": "x", "project": "x", "path": "/x",'
            ' "created_at": "2026-01-01T00:00:00Z", "admin": true}',
            "Extra inputs",
        ),
    ],
)
def test_bad_token_files_are_reported(tmp_path: Path, content: str, problem: str) -> None:
    path = tmp_path / "x"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(TokenError, match=re.escape(str(path))) as caught:
        read_token_file(path)
    assert problem in str(caught.value)
    assert "a" * 64 not in str(caught.value)


def test_registry_load_skips_and_reports_bad_files(tmp_path: Path) -> None:
    tokens_dir = tmp_path / "tokens"
    good = [record("one"), record("two")]
    for item in good:
        write_token_file(tokens_dir, item)
    (tokens_dir / "broken").write_text("{", encoding="utf-8")
    (tokens_dir / ".one.abc.tmp").write_text("{", encoding="utf-8")  # a write in progress
    registry, errors = TokenRegistry.load(tokens_dir)
    assert len(registry) == 2
    assert [str(error).split(":")[0] for error in errors] == [str(tokens_dir / "broken")]
    for item in good:
        assert registry.lookup(item.secret) == item


def test_registry_load_of_missing_directory(tmp_path: Path) -> None:
    registry, errors = TokenRegistry.load(tmp_path / "absent")
    assert (len(registry), errors) == (0, [])


def test_lookup_and_revoke() -> None:
    one, two = record("one"), record("two")
    registry = TokenRegistry([one, two])
    assert registry.lookup(one.secret) == one
    assert one.secret in registry
    # A near miss, the wrong case, garbage and hostile input all miss without raising.
    near = one.secret[:-1] + ("0" if one.secret[-1] != "0" else "1")
    for attempt in (near, one.secret.upper(), "", "x" * 10_000, "\ud800", one.secret + "\x00"):
        assert registry.lookup(attempt) is None
    assert registry.revoke(one.secret) == one
    assert registry.lookup(one.secret) is None
    assert registry.revoke(one.secret) is None
    assert list(registry) == [two]


def test_revoke_cloister() -> None:
    first, second = record("one"), record("one")
    registry = TokenRegistry([first, second, record("two")])
    assert set(map(id, registry.revoke_cloister("one"))) == {id(first), id(second)}
    assert len(registry) == 1


def test_reserved_cloister_names_are_refused() -> None:
    with pytest.raises(ValueError, match="reserved"):
        record("guardian")
    with pytest.raises(CloisterNameError, match="reserved"):
        remove_token_file(Path("/nonexistent"), "guardian-x")


def test_registry_load_of_an_unreadable_directory(tmp_path: Path) -> None:
    tokens_dir = tmp_path / "tokens"
    tokens_dir.write_text("not a directory", encoding="utf-8")
    registry, errors = TokenRegistry.load(tokens_dir)
    assert len(registry) == 0
    assert "cannot list token files" in str(errors[0])


def test_a_token_is_accepted_only_from_its_cloisters_address() -> None:
    record = TokenRecord.create(cloister="api", project="api", path=Path("/w"))
    assert not record.accepts_from("172.30.0.5")  # not bound yet: refused everywhere
    bound = record.bound_to("172.30.0.5")
    assert bound.secret == record.secret
    assert bound.accepts_from("172.30.0.5")
    assert bound.accepts_from("::ffff:172.30.0.5")  # a dual-stack socket's view
    for other in ("172.30.0.6", "127.0.0.1", None, "", "not-an-address", "::1"):
        assert not bound.accepts_from(other), other
    v6 = record.bound_to("fd00::0005")
    assert v6.address == "fd00::5"
    assert v6.accepts_from("fd00:0::5")


def test_an_address_that_is_not_one_is_refused() -> None:
    with pytest.raises(ValidationError):
        TokenRecord.create(cloister="api", project="api", path=Path("/w"), address="cloister-x")


def test_remove_tokens_bound_to_an_address(tmp_path: Path) -> None:
    write_token_file(tmp_path, record("old").bound_to("172.30.0.5"))
    write_token_file(tmp_path, record("other").bound_to("172.30.0.6"))
    write_token_file(tmp_path, record("unbound"))
    (tmp_path / "broken").write_text("{", encoding="utf-8")
    assert remove_tokens_bound_to(tmp_path, "172.30.0.5") == ["old"]
    assert sorted(path.name for path in tmp_path.iterdir()) == ["broken", "other", "unbound"]
    assert remove_tokens_bound_to(tmp_path, "172.30.0.5") == []


def test_the_token_of_the_cloister_kept_is_not_removed(tmp_path: Path) -> None:
    # A start of api revokes what others left at its address, never its own (a start of
    # the same name under way has written it).
    write_token_file(tmp_path, record("old").bound_to("172.30.0.5"))
    write_token_file(tmp_path, record("api").bound_to("172.30.0.5"))
    assert remove_tokens_bound_to(tmp_path, "172.30.0.5", keep="api") == ["old"]
    assert [path.name for path in tmp_path.iterdir()] == ["api"]


def test_a_record_names_the_agent_it_was_started_with(tmp_path: Path) -> None:
    item = record().for_agent("codex")
    assert item.agent == "codex"
    path = write_token_file(tmp_path, item)
    assert json.loads(path.read_text(encoding="utf-8"))["agent"] == "codex"
    assert read_token_file(path) == item
    assert record().for_agent(None).agent is None
    with pytest.raises(CloisterNameError, match=re.escape("agent name '../codex' is not valid")):
        record().for_agent("../codex")


def test_a_record_without_an_agent_is_written_and_read_as_before(tmp_path: Path) -> None:
    item = record()
    path = write_token_file(tmp_path, item)
    written = json.loads(path.read_text(encoding="utf-8"))
    # A proxy from before the field forbids unknown keys: a shell's record has none.
    assert "agent" not in written
    assert read_token_file(path) == item
    written["agent"] = "Not An Agent"
    path.write_text(json.dumps(written), encoding="utf-8")
    with pytest.raises(TokenError, match="agent: Value error, agent name 'Not An Agent'"):
        read_token_file(path)
