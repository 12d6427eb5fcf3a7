"""The key is masked in an answer however the reads split it, and nothing else is held."""

from __future__ import annotations

import pytest

from cloister_proxy.credentials.scrub import MIN_SECRET_LENGTH, Scrubber

KEY = b"sk-ant-api03-the-real-key-0123456789"
MASK = b"*" * len(KEY)


def relay(scrubber: Scrubber, pieces: list[bytes]) -> bytes:
    return b"".join(scrubber.feed(piece) for piece in pieces) + scrubber.flush()


@pytest.mark.parametrize("split", range(1, 80))
def test_the_key_split_anywhere_is_masked(split: int) -> None:
    body = b'{"error": "invalid key ' + KEY + b" (and again: " + KEY + b')"}'
    out = relay(Scrubber(KEY), [body[:split], body[split:]])
    assert out == body.replace(KEY, MASK)
    assert len(out) == len(body)  # a Content-Length still holds


def test_a_byte_at_a_time_is_masked() -> None:
    body = b"before " + KEY + b" after"
    out = relay(Scrubber(KEY), [body[i : i + 1] for i in range(len(body))])
    assert out == b"before " + MASK + b" after"


def test_only_a_tail_that_begins_the_key_is_held() -> None:
    scrubber = Scrubber(KEY)
    event = b"event: content_block_delta\ndata: {}\n\n"
    assert scrubber.feed(event) == event  # a stream event goes on at once
    assert scrubber.feed(b"text sk-ant") == b"text "  # might be the key: held
    assert scrubber.feed(b"-and-more") == b"sk-ant-and-more"  # it was not
    assert scrubber.flush() == b""


def test_a_held_tail_comes_out_at_the_end() -> None:
    scrubber = Scrubber(KEY)
    assert scrubber.feed(b"ends with sk-ant-api03") == b"ends with "
    assert scrubber.flush() == b"sk-ant-api03"


def test_a_head_is_scrubbed_whole() -> None:
    assert Scrubber(KEY).scrub(b"X-Echo: " + KEY + b"\r\n") == b"X-Echo: " + MASK + b"\r\n"


def test_a_secret_too_short_to_be_a_key_changes_nothing() -> None:
    short = b"x" * (MIN_SECRET_LENGTH - 1)
    scrubber = Scrubber(short)
    assert scrubber.feed(b"xxxxxxxxxxxxxxxxxxxx") == b"xxxxxxxxxxxxxxxxxxxx"
    assert scrubber.scrub(short) == short
