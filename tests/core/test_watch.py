"""Polling token and policy files: changes are picked up, broken files keep the last good."""

from __future__ import annotations

from pathlib import Path

import pytest

from cloister_core.errors import TokenError
from cloister_core.paths import CloisterPaths
from cloister_core.tokens import TokenRecord, TokenRegistry, remove_token_file, write_token_file
from cloister_core.watch import PolicyBook, TokenDirectory, directory_signature, file_signature


def test_signatures(tmp_path: Path) -> None:
    assert file_signature(tmp_path / "absent") is None
    path = tmp_path / "f"
    path.write_text("a", encoding="utf-8")
    before = file_signature(path)
    path.write_text("ab", encoding="utf-8")
    assert file_signature(path) != before
    (tmp_path / ".hidden").write_text("x", encoding="utf-8")
    assert [name for name, _ in directory_signature(tmp_path)] == ["f"]
    assert directory_signature(tmp_path / "absent") == ()


def test_token_directory(tmp_path: Path) -> None:
    messages: list[str] = []
    tokens = TokenDirectory(tmp_path / "tokens", messages.append)
    assert tokens.refresh() == []
    record = TokenRecord.create(cloister="a", project="a", path=Path("/w"))
    write_token_file(tmp_path / "tokens", record)
    assert tokens.refresh() == []
    assert tokens.registry.lookup(record.secret) == record
    (tmp_path / "tokens" / "broken").write_text("{", encoding="utf-8")
    tokens.refresh()
    assert any("ignoring token file" in message for message in messages)
    remove_token_file(tmp_path / "tokens", "a")
    assert tokens.refresh() == [record]
    assert tokens.registry.lookup(record.secret) is None


def test_policy_book_keeps_last_good(tmp_path: Path) -> None:
    paths = CloisterPaths(tmp_path / "config", tmp_path / "data")
    paths.config_dir.mkdir()
    paths.config_file.write_text("proxy:\n  allow: [{domain: a.test}]\n", encoding="utf-8")
    messages: list[str] = []
    book = PolicyBook(paths, messages.append)
    policy = book.get("p")
    assert policy is not None
    assert policy.domains.decide("a.test", 443).action == "allow"
    paths.config_file.write_text("proxy:\n  allow: [\n", encoding="utf-8")
    assert book.refresh() == []
    assert book.get("p") is policy
    assert book.error("p") is not None
    assert messages
    assert str(paths.config_file) in messages[0]
    paths.config_file.write_text("proxy:\n  allow: [{domain: b.test}]\n", encoding="utf-8")
    assert book.refresh() == ["p"]
    fresh = book.get("p")
    assert fresh is not None
    assert fresh.domains.decide("b.test", 443).action == "allow"
    assert book.error("p") is None


def test_lookup_checks_the_file_still_exists(tmp_path: Path) -> None:
    messages: list[str] = []
    tokens = TokenDirectory(tmp_path / "tokens", messages.append)
    record = TokenRecord.create(cloister="a", project="a", path=Path("/w"))
    write_token_file(tmp_path / "tokens", record)
    tokens.refresh()
    assert tokens.lookup(record.secret) == record
    remove_token_file(tmp_path / "tokens", "a")
    assert tokens.lookup(record.secret) is None  # before any refresh
    assert tokens.lookup("0" * 64) is None


def test_a_replaced_token_file_ends_the_old_token_at_once(tmp_path: Path) -> None:
    """`cloister stop a` and `cloister start` again: the first instance's token is dead
    the moment the new file is there, and the new one works, both before any refresh."""
    tokens = TokenDirectory(tmp_path / "tokens", print)
    first = TokenRecord.create(cloister="a", project="a", path=Path("/w"))
    write_token_file(tmp_path / "tokens", first)
    tokens.refresh()
    assert tokens.lookup(first.secret) == first
    second = TokenRecord.create(cloister="a", project="a", path=Path("/w"))
    write_token_file(tmp_path / "tokens", second)
    assert tokens.lookup(first.secret) is None
    assert tokens.lookup(second.secret) == second


def test_a_new_token_works_before_any_refresh(tmp_path: Path) -> None:
    """`cloister start` writes the file and the agent's first request follows at once."""
    tokens = TokenDirectory(tmp_path / "tokens", print)
    tokens.refresh()
    record = TokenRecord.create(cloister="a", project="a", path=Path("/w"))
    write_token_file(tmp_path / "tokens", record)
    assert tokens.lookup(record.secret) == record


def test_an_unknown_token_rereads_only_a_changed_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    record = TokenRecord.create(cloister="a", project="a", path=Path("/w"))
    write_token_file(tmp_path / "tokens", record)
    tokens = TokenDirectory(tmp_path / "tokens", print)
    tokens.refresh()
    loads: list[Path] = []
    real_load = TokenRegistry.load

    def counting_load(directory: Path) -> tuple[TokenRegistry, list[TokenError]]:
        loads.append(directory)
        return real_load(directory)

    monkeypatch.setattr(TokenRegistry, "load", staticmethod(counting_load))
    for _ in range(100):
        assert tokens.lookup("0" * 64) is None
    assert loads == []


def test_tokens_a_lookup_found_gone_are_still_reported_by_refresh(tmp_path: Path) -> None:
    """The proxy closes a revoked token's tunnels from what refresh() returns."""
    first = TokenRecord.create(cloister="a", project="a", path=Path("/w"))
    write_token_file(tmp_path / "tokens", first)
    tokens = TokenDirectory(tmp_path / "tokens", print)
    tokens.refresh()
    remove_token_file(tmp_path / "tokens", "a")
    second = TokenRecord.create(cloister="b", project="b", path=Path("/w"))
    write_token_file(tmp_path / "tokens", second)
    assert tokens.lookup(second.secret) == second  # re-reads: "a" is gone now
    assert tokens.refresh() == [first]
    assert tokens.refresh() == []
