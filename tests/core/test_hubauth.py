"""The hub's credential formats: login tickets, and the browser sessions' revocation file."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from cloister_core.hubauth import (
    MAX_TICKET_SECONDS,
    REVOKED_BEFORE,
    TicketError,
    login_url,
    mint_ticket,
    parse_revoked_before,
    revoke_sessions,
    sessions_dir,
    verify_ticket,
)

SECRET = "s" * 64
NOW = 1_700_000_000.0


def test_a_ticket_is_verified_once_minted_and_refused_when_changed() -> None:
    ticket = mint_ticket(SECRET, now=NOW)
    checked = verify_ticket(SECRET, ticket, now=NOW + 59)
    assert checked.expiry == int(NOW) + 60
    assert checked.issued == int(NOW)  # the hub refuses it after a logout after NOW
    assert checked.nonce == ticket.split(".")[0]
    with pytest.raises(TicketError, match="expired"):
        verify_ticket(SECRET, ticket, now=NOW + 60)
    with pytest.raises(TicketError, match="another hub secret"):
        verify_ticket("t" * 64, ticket, now=NOW)
    with pytest.raises(TicketError, match="not valid"):
        verify_ticket(SECRET, ticket + "0", now=NOW)


def test_the_issue_time_is_covered_by_the_mac_and_bounds_the_life() -> None:
    nonce, issued, expiry, digest = mint_ticket(SECRET, now=NOW).split(".")
    # Made to look newer than a logout: the MAC no longer matches.
    with pytest.raises(TicketError, match="another hub secret"):
        verify_ticket(SECRET, f"{nonce}.{int(issued) + 30}.{expiry}.{digest}", now=NOW)
    long_lived = mint_ticket(SECRET, now=NOW - 100, lifetime=MAX_TICKET_SECONDS + 1)
    with pytest.raises(TicketError, match="longer than 600s"):
        verify_ticket(SECRET, long_lived, now=NOW)
    # The old format, without the issue time, is no ticket.
    with pytest.raises(TicketError, match="not valid"):
        verify_ticket(SECRET, f"{nonce}.{expiry}.{digest}", now=NOW)


def test_the_login_url_carries_the_ticket_in_its_query() -> None:
    url = login_url("http://127.0.0.1:9999/", SECRET, now=NOW)
    assert url.startswith("http://127.0.0.1:9999/login?ticket=")
    verify_ticket(SECRET, url.partition("ticket=")[2], now=NOW)


def test_the_sessions_directory_is_beside_the_secret(tmp_path: Path) -> None:
    assert sessions_dir(tmp_path / "guardian" / "hub.secret") == tmp_path / "guardian" / (
        "hub-sessions"
    )


def test_revoking_writes_the_second_after_now_atomically(tmp_path: Path) -> None:
    directory = tmp_path / "hub-sessions"
    assert revoke_sessions(directory, now=NOW + 0.5) == int(NOW) + 1
    path = directory / REVOKED_BEFORE
    assert path.read_text(encoding="ascii") == f"{int(NOW) + 1}\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o644  # the hub's user reads it
    first = path.stat().st_ino
    revoke_sessions(directory, now=NOW + 10)
    assert path.stat().st_ino != first  # a new file: a mounted directory shows it at once
    assert [entry.name for entry in directory.iterdir()] == [REVOKED_BEFORE]


@pytest.mark.parametrize("text", ["", "soon", "-1", "1.5", "9" * 13, "²³", "12 34"])
def test_only_unix_seconds_are_a_cut_off(text: str) -> None:
    with pytest.raises(ValueError, match="not Unix seconds"):
        parse_revoked_before(text)


def test_a_cut_off_may_have_surrounding_whitespace() -> None:
    assert parse_revoked_before(" 1700000001\n") == 1_700_000_001
