"""Request bodies as the credential gateway sends them upstream: re-chunked, sans I/O."""

from __future__ import annotations

import pytest

from cloister_proxy.credentials.body import UpstreamBody
from cloister_proxy.http1 import NO_BODY, BodyTracker, Framing, HttpError

CHUNKED = Framing("chunked")
# Extensions, a quoted one, space before ";", and a trailer section: all the client's.
SENT = (
    b"5;name=value\r\nhello\r\n"
    b'6 ;a="b;c"\r\n world\r\n'
    b"0;last=1\r\n"
    b"X-Trailer: smuggled\r\nAuthorization: Bearer other\r\n\r\n"
)


def run(body: UpstreamBody, *pieces: bytes) -> tuple[bytes, int]:
    """Feed *pieces*; what went upstream, and how many bytes were taken."""
    out, taken = b"", 0
    for piece in pieces:
        count, sent = body.feed(piece)
        out += sent
        taken += count
    return out, taken


def decode(chunked: bytes) -> bytes:
    """The data of a chunked body, checked by the proxy's own strict tracker."""
    tracker = BodyTracker(CHUNKED)
    assert tracker.feed(chunked) == len(chunked)
    assert tracker.done
    data, rest = b"", chunked
    while True:
        line, _, rest = rest.partition(b"\r\n")
        size = int(line, 16)
        if size == 0:
            assert rest == b"\r\n"  # no trailer
            return data
        data, rest = data + rest[:size], rest[size + 2 :]


def test_extensions_and_trailers_are_not_sent_and_the_data_is() -> None:
    body = UpstreamBody(CHUNKED)
    out, taken = run(body, SENT)
    assert body.done
    assert taken == len(SENT)
    assert out == b"b\r\nhello world\r\n0\r\n\r\n"  # one read, one chunk
    assert decode(out) == b"hello world"


@pytest.mark.parametrize("cut", range(1, len(SENT)))
def test_any_split_of_the_reads_sends_the_same_data(cut: int) -> None:
    body = UpstreamBody(CHUNKED)
    out, taken = run(body, SENT[:cut], SENT[cut:])
    assert body.done
    assert taken == len(SENT)
    assert decode(out) == b"hello world"
    assert b";" not in out
    assert b"smuggled" not in out
    assert b"Bearer" not in out


def test_a_byte_at_a_time_streams_and_never_sends_an_empty_chunk() -> None:
    body = UpstreamBody(CHUNKED)
    sent = [body.feed(SENT[i : i + 1])[1] for i in range(len(SENT))]
    assert body.done
    data_pieces = [piece for piece in sent if piece and piece != b"0\r\n\r\n"]
    assert [piece[:3] for piece in data_pieces] == [b"1\r\n"] * len(b"hello world")
    assert sent[-1] == b"0\r\n\r\n"
    assert sent.count(b"0\r\n\r\n") == 1
    assert decode(b"".join(sent)) == b"hello world"


def test_each_read_goes_on_at_once() -> None:
    body = UpstreamBody(CHUNKED)
    count, out = body.feed(b"400\r\n" + b"a" * 100)
    assert (count, out) == (105, b"64\r\n" + b"a" * 100 + b"\r\n")
    assert not body.done


def test_what_follows_the_body_is_left_for_the_next_request() -> None:
    body = UpstreamBody(CHUNKED)
    following = b"POST /claude/v1/messages HTTP/1.1\r\n"
    count, out = body.feed(b"2\r\nhi\r\n0\r\n\r\n" + following)
    assert body.done
    assert count == len(b"2\r\nhi\r\n0\r\n\r\n")
    assert out == b"2\r\nhi\r\n0\r\n\r\n"
    assert body.feed(following) == (0, b"")


def test_a_length_body_goes_as_it_comes() -> None:
    body = UpstreamBody(Framing("length", 5))
    assert body.feed(b"hel") == (3, b"hel")
    assert body.feed(b"lo, next") == (2, b"lo")
    assert body.done


def test_no_body_is_done_at_once() -> None:
    assert UpstreamBody(NO_BODY).done
    assert UpstreamBody(Framing("length", 0)).done


def test_a_body_to_the_close_is_not_a_request_body() -> None:
    with pytest.raises(ValueError, match="close"):
        UpstreamBody(Framing("close"))


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"5\nhello\r\n0\r\n\r\n", "CRLF"),
        (b"x\r\n", "malformed chunk size"),
        (b"-1\r\n", "malformed chunk size"),
        (b"5\r\nhello!\r\n", "longer than its size"),
        (b"1;a\x00b\r\n", "malformed chunk size"),
        (b"0\r\nno colon\r\n\r\n", "malformed trailer"),
        (b"0\r\nName : v\r\n\r\n", "malformed trailer"),
        (b"0\r\nName: a\x01b\r\n\r\n", "malformed trailer"),
        (b"0\r\n folded: v\r\n\r\n", "malformed trailer"),
        (b"1" + b"0" * 16 + b"\r\n", "malformed chunk size"),
        (b"1;" + b"a" * 5000 + b"\r\n", "too long"),
    ],
)
def test_malformed_framing_is_a_400(raw: bytes, message: str) -> None:
    body = UpstreamBody(CHUNKED)
    with pytest.raises(HttpError, match=message) as caught:
        body.feed(raw)
    assert caught.value.status == 400


def test_a_trailer_section_beyond_the_head_limit_is_refused() -> None:
    body = UpstreamBody(CHUNKED)
    field = b"X-Pad: " + b"a" * 4000 + b"\r\n"
    body.feed(b"0\r\n" + field * 4)  # 4 x 4,009 bytes: within the limit
    assert not body.done
    with pytest.raises(HttpError, match="trailer section") as caught:
        body.feed(field)
    assert caught.value.status == 431
