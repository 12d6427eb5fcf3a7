"""The proxy's sans-I/O HTTP/1 module: bytes in, parsed values or ``HttpError`` out.

The sections follow the module: the head scanner and its 16 KiB limit, request heads
(line syntax, fields, framing), request targets, response heads, the body tracker
(length, chunked, close), the renderers, and property tests that push random,
truncated and mutated input through the path the server takes (an incremental
``find_head_end``, then the parsers and the body tracker) and allow nothing but an
``HttpError`` with a 4xx/5xx status.

Tests whose docstring starts with "Defect" pin down behaviour that http1.py gets
wrong today; they fail until it is fixed.
"""

from __future__ import annotations

import string
import subprocess
import sys
from collections.abc import Callable, Sequence
from typing import TypeVar

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from cloister_proxy.http1 import (
    CONNECT_ESTABLISHED,
    HOP_BY_HOP,
    MAX_CHUNK_LINE,
    MAX_HEAD_BYTES,
    NO_BODY,
    BodyTracker,
    Framing,
    Headers,
    HttpError,
    ProxyTarget,
    RequestHead,
    find_head_end,
    parse_request_head,
    parse_response_head,
    parse_target,
    render_forward_request,
    render_forward_response,
    render_response,
)

T = TypeVar("T")


def message(start_line: str, *fields: str) -> bytes:
    """A head: the start line and each field on a CRLF line, then the empty line."""
    return "".join(f"{line}\r\n" for line in (start_line, *fields)).encode("latin-1") + b"\r\n"


def parsed_or_refused(call: Callable[[], T], status: int) -> T | None:
    """What *call* returns, or None when it refuses with exactly *status*."""
    try:
        return call()
    except HttpError as error:
        refused = error
    assert refused.status == status, refused.message
    return None


def is_done(tracker: BodyTracker) -> bool:
    """``tracker.done``, read through a call so mypy does not pin its narrowed value."""
    return tracker.done


def refusal(call: Callable[[], object]) -> HttpError:
    """The HttpError that *call* raises (the test fails if it returns)."""
    with pytest.raises(HttpError) as info:
        call()
    return info.value


def split(data: bytes, sizes: Sequence[int]) -> list[bytes]:
    """*data* cut into pieces of the given sizes, the rest (if any) as a last piece."""
    pieces: list[bytes] = []
    position = 0
    for size in sizes:
        if position >= len(data):
            break
        pieces.append(data[position : position + size])
        position += size
    if position < len(data):
        pieces.append(data[position:])
    return pieces


def scan(pieces: Sequence[bytes]) -> tuple[bytes, int]:
    """Grow a buffer piece by piece the way the server does; (buffer, head end or -1)."""
    buffer = bytearray()
    scanned = 0
    for piece in pieces:
        buffer += piece
        end = find_head_end(buffer, scanned)
        if end >= 0:
            return bytes(buffer), end
        scanned = len(buffer)
    return bytes(buffer), -1


REQUEST = b"GET http://example.com/ HTTP/1.1\r\nHost: example.com\r\n\r\n"
PIPELINED = b"GET http://example.com/next HTTP/1.1\r\n\r\n"


def padded_head(total: int) -> bytes:
    """A valid request head of exactly *total* bytes (one long X-Pad field)."""
    opening = b"GET http://example.com/ HTTP/1.1\r\nX-Pad: "
    closing = b"\r\n\r\n"
    return opening + b"a" * (total - len(opening) - len(closing)) + closing


# --------------------------------------------------------------------------------------
# find_head_end


@pytest.mark.parametrize(
    ("buffer", "start", "expected"),
    [
        pytest.param(b"", 0, -1, id="empty"),
        pytest.param(b"GET / HTTP/1.1\r\n", 0, -1, id="one-line"),
        pytest.param(b"GET / HTTP/1.1\r\n\r", 0, -1, id="three-of-four"),
        pytest.param(b"GET / HTTP/1.1\n\n", 0, -1, id="bare-LFs-never-end-a-head"),
        pytest.param(b"GET / HTTP/1.1\r\r\n\n", 0, -1, id="scrambled-terminator"),
        pytest.param(b"\r\n\r\n", 0, 4, id="only-terminator"),
        pytest.param(REQUEST, 0, len(REQUEST), id="whole-head"),
        pytest.param(REQUEST + b"body\r\n\r\n", 0, len(REQUEST), id="body-follows"),
        pytest.param(REQUEST + PIPELINED, 0, len(REQUEST), id="first-terminator-wins"),
        pytest.param(REQUEST, len(REQUEST) - 1, len(REQUEST), id="looks-back-3"),
        pytest.param(REQUEST, len(REQUEST) - 4, len(REQUEST), id="start-at-terminator"),
        pytest.param(REQUEST, len(REQUEST), -1, id="start-past-terminator"),
        pytest.param(
            REQUEST + PIPELINED, len(REQUEST), len(REQUEST) + len(PIPELINED), id="skips-earlier"
        ),
    ],
)
def test_find_head_end(buffer: bytes, start: int, expected: int) -> None:
    assert find_head_end(buffer, start) == expected
    assert find_head_end(bytearray(buffer), start) == expected


@pytest.mark.parametrize(
    ("first", "second"),
    [
        pytest.param(REQUEST[:-3], REQUEST[-3:], id="CR|LF-CR-LF"),
        pytest.param(REQUEST[:-2], REQUEST[-2:], id="CR-LF|CR-LF"),
        pytest.param(REQUEST[:-1], REQUEST[-1:], id="CR-LF-CR|LF"),
    ],
)
def test_terminator_split_across_two_reads(first: bytes, second: bytes) -> None:
    assert find_head_end(first, 0) == -1
    assert find_head_end(first + second, len(first)) == len(REQUEST)


def test_every_split_point_finds_the_same_end() -> None:
    data = REQUEST + PIPELINED
    for cut in range(len(data) + 1):
        first = find_head_end(data[:cut], 0)
        if cut >= len(REQUEST):
            assert first == len(REQUEST), cut
        else:
            assert first == -1, cut
            assert find_head_end(data, cut) == len(REQUEST), cut


def test_byte_by_byte_scan_stops_at_the_terminator() -> None:
    data = REQUEST + PIPELINED
    scanned = 0
    for size in range(1, len(data) + 1):
        end = find_head_end(data[:size], scanned)
        if size < len(REQUEST):
            assert end == -1, size
            scanned = size
        else:
            assert size == len(REQUEST)
            assert end == len(REQUEST)
            break
    assert scan([bytes([byte]) for byte in data]) == (REQUEST, len(REQUEST))


def test_head_of_exactly_the_limit_is_accepted() -> None:
    head = padded_head(MAX_HEAD_BYTES)
    assert len(head) == MAX_HEAD_BYTES
    assert find_head_end(head) == MAX_HEAD_BYTES
    assert find_head_end(head + PIPELINED) == MAX_HEAD_BYTES
    assert scan(split(head, [1000] * 20)) == (head, MAX_HEAD_BYTES)
    parsed = parse_request_head(head)
    assert parsed.headers.get("x-pad") == "a" * (MAX_HEAD_BYTES - 45)


@pytest.mark.parametrize("trailing", [b"", PIPELINED])
def test_terminated_head_one_byte_over_the_limit_is_431(trailing: bytes) -> None:
    head = padded_head(MAX_HEAD_BYTES + 1)
    assert refusal(lambda: find_head_end(head + trailing)).status == 431
    error = refusal(lambda: scan(split(head + trailing, [4096] * 8)))
    assert error.status == 431
    assert str(MAX_HEAD_BYTES) in error.message


def test_terminator_arriving_past_the_limit_is_431() -> None:
    first = b"x" * (MAX_HEAD_BYTES - 2)
    assert find_head_end(first) == -1
    assert refusal(lambda: find_head_end(first + b"\r\n\r\n", len(first))).status == 431


def test_unterminated_buffer_of_the_limit_waits_one_byte_more_is_431() -> None:
    assert find_head_end(b"x" * MAX_HEAD_BYTES) == -1
    assert find_head_end(b"x" * MAX_HEAD_BYTES, MAX_HEAD_BYTES - 10) == -1
    assert refusal(lambda: find_head_end(b"x" * (MAX_HEAD_BYTES + 1))).status == 431
    assert refusal(lambda: find_head_end(b"x" * (MAX_HEAD_BYTES + 1), MAX_HEAD_BYTES)).status == (
        431
    )


def test_incremental_unterminated_head_fails_on_the_read_that_crosses_the_limit() -> None:
    buffer = bytearray()
    scanned = 0
    for _ in range(MAX_HEAD_BYTES // 1024):
        buffer += b"y" * 1024
        assert find_head_end(buffer, scanned) == -1
        scanned = len(buffer)
    assert len(buffer) == MAX_HEAD_BYTES
    buffer += b"y"
    assert refusal(lambda: find_head_end(buffer, scanned)).status == 431


def test_head_within_the_limit_is_found_in_a_longer_buffer() -> None:
    data = b"x" * (MAX_HEAD_BYTES - 4) + b"\r\n\r\n" + b"body" * 100
    assert find_head_end(data) == MAX_HEAD_BYTES


# --------------------------------------------------------------------------------------
# parse_request_head: request line, fields


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        pytest.param(
            message(
                "CONNECT example.com:443 HTTP/1.1",
                "Host: example.com:443",
                "Proxy-Authorization: Basic dG9rZW4=",
            ),
            RequestHead(
                method="CONNECT",
                target="example.com:443",
                version="HTTP/1.1",
                headers=Headers(
                    (("Host", "example.com:443"), ("Proxy-Authorization", "Basic dG9rZW4="))
                ),
                framing=NO_BODY,
            ),
            id="connect",
        ),
        pytest.param(
            message("GET http://example.com/a?b=c HTTP/1.1", "Host: example.com"),
            RequestHead(
                method="GET",
                target="http://example.com/a?b=c",
                version="HTTP/1.1",
                headers=Headers((("Host", "example.com"),)),
                framing=NO_BODY,
            ),
            id="absolute-form",
        ),
        pytest.param(
            message("GET /healthz HTTP/1.1"),
            RequestHead("GET", "/healthz", "HTTP/1.1", Headers(()), NO_BODY),
            id="origin-form",
        ),
        pytest.param(
            message("POST http://example.com/ HTTP/1.0", "Content-Length: 3"),
            RequestHead(
                "POST",
                "http://example.com/",
                "HTTP/1.0",
                Headers((("Content-Length", "3"),)),
                Framing("length", 3),
            ),
            id="http-1.0",
        ),
        pytest.param(
            message("get /%7e?q=caf%C3%A9 HTTP/1.1"),
            RequestHead("get", "/%7e?q=caf%C3%A9", "HTTP/1.1", Headers(()), NO_BODY),
            id="methods-are-case-sensitive-tokens",
        ),
    ],
)
def test_parse_request_head(raw: bytes, expected: RequestHead) -> None:
    assert parse_request_head(raw) == expected


@pytest.mark.parametrize(
    ("version", "fields", "keep_alive"),
    [
        ("HTTP/1.1", [], True),
        ("HTTP/1.1", ["Connection: keep-alive"], True),
        ("HTTP/1.1", ["Connection: close"], False),
        ("HTTP/1.1", ["Connection: Close"], False),
        ("HTTP/1.1", ["Connection: keep-alive, close"], False),
        ("HTTP/1.1", ["Connection: keep-alive", "Connection: close"], False),
        ("HTTP/1.1", ["Connection: Upgrade"], True),
        ("HTTP/1.1", ["Connection: closed"], True),
        ("HTTP/1.0", [], False),
        ("HTTP/1.0", ["Connection: keep-alive"], True),
        ("HTTP/1.0", ["connection: Keep-Alive"], True),
        ("HTTP/1.0", ["Connection: close"], False),
        ("HTTP/1.0", ["Keep-Alive: timeout=5"], False),
    ],
)
def test_request_keep_alive(version: str, fields: list[str], keep_alive: bool) -> None:
    head = parse_request_head(message(f"GET http://example.com/ {version}", *fields))
    assert head.keep_alive is keep_alive


def test_field_order_and_name_case_are_kept_and_values_trimmed() -> None:
    head = parse_request_head(
        message(
            "GET / HTTP/1.1",
            "host: a",
            "X-Custom-THING: One",
            "ACCEPT:*/*",
            "x-custom-thing: two",
            "X-Empty:",
            "X-Blank: \t ",
            "X-Spaces: \t padded  value \t ",
            "X-Tab: a\tb",
            "X-Latin: caf\xe9 \x80",
        )
    )
    assert head.headers.fields == (
        ("host", "a"),
        ("X-Custom-THING", "One"),
        ("ACCEPT", "*/*"),
        ("x-custom-thing", "two"),
        ("X-Empty", ""),
        ("X-Blank", ""),
        ("X-Spaces", "padded  value"),
        ("X-Tab", "a\tb"),
        ("X-Latin", "caf\xe9 \x80"),
    )


# --------------------------------------------------------------------------------------
# Headers

SAMPLE_HEADERS = Headers(
    (
        ("Host", "example.com"),
        ("X-Multi", "one"),
        ("accept", "*/*"),
        ("x-MULTI", "two"),
    )
)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("Host", "example.com"),
        ("host", "example.com"),
        ("HOST", "example.com"),
        ("Accept", "*/*"),
        ("missing", None),
    ],
)
def test_headers_get_is_case_insensitive(name: str, value: str | None) -> None:
    assert SAMPLE_HEADERS.get(name) == value


@pytest.mark.parametrize("name", ["X-Multi", "x-multi"])
def test_headers_get_refuses_repeated_fields(name: str) -> None:
    error = refusal(lambda: SAMPLE_HEADERS.get(name))
    assert error.status == 400
    assert name in error.message


@pytest.mark.parametrize(
    ("name", "values"),
    [("x-multi", ["one", "two"]), ("X-MULTI", ["one", "two"]), ("Host", ["example.com"])],
)
def test_headers_get_all(name: str, values: list[str]) -> None:
    assert SAMPLE_HEADERS.get_all(name) == values
    assert SAMPLE_HEADERS.get_all("absent") == []


@pytest.mark.parametrize(
    ("fields", "tokens"),
    [
        ((), frozenset()),
        ((("Connection", "close"),), frozenset({"close"})),
        (
            (("Connection", "Keep-Alive, X-Foo ,, "), ("connection", "Upgrade")),
            frozenset({"keep-alive", "x-foo", "upgrade"}),
        ),
        ((("Connection", " , "),), frozenset()),
        ((("Proxy-Connection", "close"),), frozenset()),
    ],
)
def test_connection_tokens(fields: tuple[tuple[str, str], ...], tokens: frozenset[str]) -> None:
    assert Headers(fields).connection_tokens() == tokens


def test_hop_by_hop_set() -> None:
    assert (
        frozenset(
            {
                "connection",
                "keep-alive",
                "proxy-connection",
                "proxy-authorization",
                "proxy-authenticate",
                "te",
                "trailer",
                "upgrade",
            }
        )
        == HOP_BY_HOP
    )


def test_without_hop_by_hop_drops_listed_and_named_fields() -> None:
    headers = Headers(
        (
            ("Host", "example.com"),
            ("CONNECTION", "X-Private, keep-alive"),
            ("Keep-Alive", "timeout=5"),
            ("Proxy-Connection", "keep-alive"),
            ("Proxy-Authorization", "Basic dG9rZW4="),
            ("Proxy-Authenticate", "Basic"),
            ("te", "trailers"),
            ("Trailer", "Expires"),
            ("Upgrade", "websocket"),
            ("x-private", "secret"),
            ("Transfer-Encoding", "chunked"),
            ("Accept", "*/*"),
        )
    )
    assert headers.without_hop_by_hop() == [
        ("Host", "example.com"),
        ("Transfer-Encoding", "chunked"),
        ("Accept", "*/*"),
    ]
    assert headers.without_hop_by_hop(also=("HOST",)) == [
        ("Transfer-Encoding", "chunked"),
        ("Accept", "*/*"),
    ]


# --------------------------------------------------------------------------------------
# parse_request_head: refusals

REQUEST_REFUSALS = [
    # line endings
    pytest.param(b"GET / HTTP/1.1\nHost: a\r\n\r\n", 400, id="LF-after-request-line"),
    pytest.param(b"GET / HTTP/1.1\r\nHost: a\nX: b\r\n\r\n", 400, id="LF-between-fields"),
    pytest.param(b"GET / HTTP/1.1\r\nHost: a\n\r\n", 400, id="LF-before-empty-line"),
    pytest.param(b"GET / HTTP/1.1\n\n", 400, id="LF-only"),
    pytest.param(b"GET / HTTP/1.1\r\nX: a\rb\r\n\r\n", 400, id="bare-CR-in-value"),
    pytest.param(b"GET / HTTP/1.1\r\nX: a\r\r\n\r\n", 400, id="CR-before-CRLF"),
    pytest.param(b"GET / HTTP/1.1\r\r\n\r\n", 400, id="bare-CR-in-request-line"),
    pytest.param(b"GET / HTTP/1.1\r\n", 400, id="no-empty-line"),
    pytest.param(b"GET / HTTP/1.1\r\nX: a\r\n\r\n\r\n", 400, id="empty-line-inside"),
    pytest.param(b"\r\nGET / HTTP/1.1\r\n\r\n", 400, id="leading-empty-line"),
    pytest.param(b"\r\n\r\n", 400, id="empty-head"),
    # obs-fold and whitespace
    pytest.param(message("GET / HTTP/1.1", "X: a", " b"), 400, id="obs-fold-space"),
    pytest.param(message("GET / HTTP/1.1", "X: a", "\tb"), 400, id="obs-fold-tab"),
    pytest.param(message("GET / HTTP/1.1", " X: a"), 400, id="space-before-first-field"),
    pytest.param(message("GET / HTTP/1.1", "Host : a"), 400, id="space-before-colon"),
    pytest.param(message("GET / HTTP/1.1", "Host\t: a"), 400, id="tab-before-colon"),
    # field syntax
    pytest.param(message("GET / HTTP/1.1", ": a"), 400, id="empty-name"),
    pytest.param(message("GET / HTTP/1.1", "Host a"), 400, id="no-colon"),
    pytest.param(message("GET / HTTP/1.1", "X(Y): a"), 400, id="non-token-name"),
    pytest.param(message("GET / HTTP/1.1", "X\xe9: a"), 400, id="non-ascii-name"),
    pytest.param(message("GET / HTTP/1.1", "X: a\x00b"), 400, id="NUL-in-value"),
    pytest.param(message("GET / HTTP/1.1", "X: a\x01"), 400, id="SOH-in-value"),
    pytest.param(message("GET / HTTP/1.1", "X: \x0bv"), 400, id="VT-in-value"),
    pytest.param(message("GET / HTTP/1.1", "X: a\x0cb"), 400, id="FF-in-value"),
    pytest.param(message("GET / HTTP/1.1", "X: a\x1fb"), 400, id="US-in-value"),
    pytest.param(message("GET / HTTP/1.1", "X: a\x7fb"), 400, id="DEL-in-value"),
    # request line
    pytest.param(message("GET  / HTTP/1.1"), 400, id="double-space-after-method"),
    pytest.param(message("GET /  HTTP/1.1"), 400, id="double-space-after-target"),
    pytest.param(message("GET / HTTP/1.1 "), 400, id="trailing-space"),
    pytest.param(message(" GET / HTTP/1.1"), 400, id="leading-space"),
    pytest.param(message("GET\t/\tHTTP/1.1"), 400, id="tabs"),
    pytest.param(message("GET /"), 400, id="missing-version"),
    pytest.param(message("GET / "), 400, id="empty-version"),
    pytest.param(message("GET"), 400, id="method-only"),
    pytest.param(message("/ HTTP/1.1"), 400, id="missing-method"),
    pytest.param(message("GET / http/1.1"), 400, id="lowercase-version"),
    pytest.param(message("GET / Http/1.1"), 400, id="mixed-case-version"),
    pytest.param(message("GET / HTTP/11"), 400, id="version-without-dot"),
    pytest.param(message("GET / HTTP/1.10"), 400, id="two-digit-minor"),
    pytest.param(message("GET / HTTP/1"), 400, id="no-minor"),
    pytest.param(message("G@T / HTTP/1.1"), 400, id="non-token-method"),
    pytest.param(message("GET /a\x00 HTTP/1.1"), 400, id="NUL-in-target"),
    pytest.param(message("GET /a\x7f HTTP/1.1"), 400, id="DEL-in-target"),
    pytest.param(message("GET / HTTP/1.1\x00"), 400, id="NUL-after-version"),
    # versions
    pytest.param(message("GET / HTTP/2.0"), 505, id="HTTP/2.0"),
    pytest.param(message("GET / HTTP/3.0"), 505, id="HTTP/3.0"),
    pytest.param(message("GET / HTTP/0.9"), 505, id="HTTP/0.9"),
    pytest.param(message("GET / HTTP/1.2"), 505, id="HTTP/1.2"),
    pytest.param(message("GET / HTTP/9.9"), 505, id="HTTP/9.9"),
    # Content-Length
    pytest.param(message("POST / HTTP/1.1", "Content-Length: abc"), 400, id="CL-letters"),
    pytest.param(message("POST / HTTP/1.1", "Content-Length: -1"), 400, id="CL-negative"),
    pytest.param(message("POST / HTTP/1.1", "Content-Length: +5"), 400, id="CL-plus"),
    pytest.param(message("POST / HTTP/1.1", "Content-Length: 0x10"), 400, id="CL-hex"),
    pytest.param(message("POST / HTTP/1.1", "Content-Length: 1e3"), 400, id="CL-exponent"),
    pytest.param(message("POST / HTTP/1.1", "Content-Length: 5 5"), 400, id="CL-two-numbers"),
    pytest.param(message("POST / HTTP/1.1", "Content-Length: 5,5"), 400, id="CL-list"),
    pytest.param(message("POST / HTTP/1.1", "Content-Length: 5, 5"), 400, id="CL-list-space"),
    pytest.param(message("POST / HTTP/1.1", "Content-Length: 5\t6"), 400, id="CL-tab-inside"),
    pytest.param(message("POST / HTTP/1.1", "Content-Length:"), 400, id="CL-empty"),
    pytest.param(message("POST / HTTP/1.1", "Content-Length: " + "1" * 19), 400, id="CL-19-digits"),
    pytest.param(
        message("POST / HTTP/1.1", "Content-Length: 5", "content-length: 6"),
        400,
        id="CL-conflicting",
    ),
    pytest.param(
        message("POST / HTTP/1.1", "Content-Length: 5", "Content-Length: x"),
        400,
        id="CL-repeat-not-numeric",
    ),
    # Transfer-Encoding
    pytest.param(
        message("POST / HTTP/1.1", "Content-Length: 5", "Transfer-Encoding: chunked"),
        400,
        id="CL-then-TE",
    ),
    pytest.param(
        message("POST / HTTP/1.1", "Transfer-Encoding: chunked", "Content-Length: 0"),
        400,
        id="TE-then-CL",
    ),
    pytest.param(message("POST / HTTP/1.1", "Transfer-Encoding: gzip"), 400, id="TE-gzip"),
    pytest.param(message("POST / HTTP/1.1", "Transfer-Encoding: identity"), 400, id="TE-identity"),
    pytest.param(
        message("POST / HTTP/1.1", "Transfer-Encoding: gzip, chunked"), 400, id="TE-gzip-chunked"
    ),
    pytest.param(
        message("POST / HTTP/1.1", "Transfer-Encoding: chunked, chunked"),
        400,
        id="TE-chunked-twice-in-one",
    ),
    pytest.param(
        message("POST / HTTP/1.1", "Transfer-Encoding: chunked", "Transfer-Encoding: chunked"),
        400,
        id="TE-two-fields",
    ),
    pytest.param(message("POST / HTTP/1.1", "Transfer-Encoding:"), 400, id="TE-empty"),
    pytest.param(
        message("POST / HTTP/1.0", "Transfer-Encoding: chunked"), 400, id="TE-in-HTTP/1.0"
    ),
]


@pytest.mark.parametrize(("raw", "status"), REQUEST_REFUSALS)
def test_request_refusals(raw: bytes, status: int) -> None:
    assert refusal(lambda: parse_request_head(raw)).status == status


@pytest.mark.parametrize(
    ("fields", "framing"),
    [
        ([], NO_BODY),
        (["Content-Length: 0"], NO_BODY),
        (["Content-Length: 000"], NO_BODY),
        (["Content-Length: 10"], Framing("length", 10)),
        (["Content-Length: 10", "content-length: 10"], Framing("length", 10)),
        (["content-length: \t 42 \t"], Framing("length", 42)),
        (["Content-Length: " + "9" * 18], Framing("length", 10**18 - 1)),
        (["Transfer-Encoding: chunked"], Framing("chunked")),
        (["transfer-encoding: CHUNKED"], Framing("chunked")),
        (["Transfer-Encoding:   chunked  "], Framing("chunked")),
    ],
)
def test_request_framing(fields: list[str], framing: Framing) -> None:
    assert parse_request_head(message("POST http://example.com/ HTTP/1.1", *fields)).framing == (
        framing
    )


# --------------------------------------------------------------------------------------
# parse_target


def target_of(method: str, target: str) -> ProxyTarget:
    return parse_target(parse_request_head(message(f"{method} {target} HTTP/1.1")))


@pytest.mark.parametrize(
    ("method", "target", "expected"),
    [
        ("CONNECT", "example.com:443", ProxyTarget("connect", "example.com", 443)),
        ("CONNECT", "EXAMPLE.com:8443", ProxyTarget("connect", "EXAMPLE.com", 8443)),
        ("CONNECT", "10.1.2.3:1", ProxyTarget("connect", "10.1.2.3", 1)),
        ("CONNECT", "example.com:65535", ProxyTarget("connect", "example.com", 65535)),
        ("CONNECT", "[::1]:443", ProxyTarget("connect", "::1", 443)),
        ("CONNECT", "[2001:db8::1]:8443", ProxyTarget("connect", "2001:db8::1", 8443)),
        ("GET", "http://example.com/", ProxyTarget("forward", "example.com", 80, "/")),
        ("GET", "http://example.com", ProxyTarget("forward", "example.com", 80, "/")),
        (
            "GET",
            "http://example.com:8080/a/b?x=1&y=2",
            ProxyTarget("forward", "example.com", 8080, "/a/b?x=1&y=2"),
        ),
        ("GET", "http://example.com?q=1", ProxyTarget("forward", "example.com", 80, "/?q=1")),
        ("GET", "http://example.com:8080?q", ProxyTarget("forward", "example.com", 8080, "/?q")),
        ("GET", "http://example.com?b=/c", ProxyTarget("forward", "example.com", 80, "/?b=/c")),
        ("GET", "http://example.com/a?b=/c", ProxyTarget("forward", "example.com", 80, "/a?b=/c")),
        ("GET", "http://example.com/p@q", ProxyTarget("forward", "example.com", 80, "/p@q")),
        ("GET", "HTTP://Example.COM/Path", ProxyTarget("forward", "Example.COM", 80, "/Path")),
        ("GET", "http://[::1]/", ProxyTarget("forward", "::1", 80, "/")),
        ("GET", "http://[2001:db8::1]:8080/x", ProxyTarget("forward", "2001:db8::1", 8080, "/x")),
        ("POST", "http://example.com/submit", ProxyTarget("forward", "example.com", 80, "/submit")),
        ("GET", "/", ProxyTarget("origin", path="/")),
        ("GET", "/healthz?verbose=1", ProxyTarget("origin", path="/healthz?verbose=1")),
        ("OPTIONS", "/", ProxyTarget("origin", path="/")),
    ],
)
def test_parse_target(method: str, target: str, expected: ProxyTarget) -> None:
    assert target_of(method, target) == expected


@pytest.mark.parametrize(
    ("method", "target", "in_message"),
    [
        ("CONNECT", "example.com", "needs a port"),
        ("CONNECT", "[::1]", "needs a port"),
        ("CONNECT", "/", "needs a port"),
        ("CONNECT", "example.com:", "invalid port"),
        ("CONNECT", "example.com:https", "invalid port"),
        ("CONNECT", "example.com:44a", "invalid port"),
        ("CONNECT", "example.com:-1", "invalid port"),
        ("CONNECT", "example.com:+443", "invalid port"),
        ("CONNECT", "example.com:123456", "invalid port"),
        ("CONNECT", "example.com:0", "out of range"),
        ("CONNECT", "example.com:65536", "out of range"),
        ("CONNECT", "example.com:99999", "out of range"),
        ("CONNECT", "user@example.com:443", "credentials"),
        ("CONNECT", "user:secret@example.com:443", "credentials"),
        ("CONNECT", ":443", "no host"),
        ("CONNECT", "[]:443", "no host"),
        ("CONNECT", "[::1:443", "unbalanced"),
        ("CONNECT", "[::1]x443", "invalid port"),
        ("CONNECT", "[::1]:", "invalid port"),
        ("GET", "http://user@example.com/", "credentials"),
        ("GET", "http://user:pw@example.com:8080/", "credentials"),
        ("GET", "https://example.com/", "CONNECT"),
        ("GET", "HTTPS://example.com:443/", "CONNECT"),
        ("GET", "ftp://example.com/", "scheme"),
        ("GET", "ws://example.com/", "scheme"),
        ("GET", "http://example.com/#top", "fragment"),
        ("GET", "http://example.com#top", "fragment"),
        ("GET", "http://example.com:0/", "out of range"),
        ("GET", "http://example.com:65536/", "out of range"),
        ("GET", "http://example.com:/", "invalid port"),
        ("GET", "http://example.com:http/", "invalid port"),
        ("GET", "http://:8080/", "no host"),
        ("GET", "*", "unsupported request target"),
        ("GET", "example.com:443", "unsupported request target"),
        ("GET", "example.com/path", "unsupported request target"),
        ("GET", "http:/example.com/", "unsupported request target"),
    ],
)
def test_parse_target_refusals(method: str, target: str, in_message: str) -> None:
    error = refusal(lambda: target_of(method, target))
    assert error.status == 400
    assert in_message in error.message


@pytest.mark.parametrize("target", ["http:///path", "http://?q=1", "http://[]/"])
def test_absolute_form_without_a_host_is_refused(target: str) -> None:
    """Defect: an empty host with the default port is accepted.

    ``_split_authority`` checks for an empty host only after it has parsed an explicit
    port, so ``GET http:///path HTTP/1.1`` gives ``ProxyTarget("forward", "", 80,
    "/path")`` instead of a 400 (``http://:8080/`` is refused). The gate's
    ``normalize_host`` refuses the empty host later, but ``parse_target`` says it
    refuses the forms the proxy does not serve.
    """
    error = refusal(lambda: target_of("GET", target))
    assert error.status == 400
    assert "no host" in error.message


@pytest.mark.parametrize(
    ("target", "authority"),
    [
        (ProxyTarget("connect", "example.com", 443), "example.com:443"),
        (ProxyTarget("forward", "example.com", 80, "/"), "example.com:80"),
        (ProxyTarget("connect", "10.0.0.1", 8080), "10.0.0.1:8080"),
        (ProxyTarget("connect", "::1", 443), "[::1]:443"),
        (ProxyTarget("forward", "2001:db8::1", 80, "/"), "[2001:db8::1]:80"),
    ],
)
def test_authority(target: ProxyTarget, authority: str) -> None:
    assert target.authority == authority


# --------------------------------------------------------------------------------------
# parse_response_head


@pytest.mark.parametrize(
    ("status_line", "version", "status", "reason"),
    [
        ("HTTP/1.1 200 OK", "HTTP/1.1", 200, "OK"),
        ("HTTP/1.1 404 Not Found", "HTTP/1.1", 404, "Not Found"),
        ("HTTP/1.0 200 OK", "HTTP/1.0", 200, "OK"),
        ("HTTP/1.1 200", "HTTP/1.1", 200, ""),
        ("HTTP/1.1 200 ", "HTTP/1.1", 200, ""),
        ("HTTP/1.1 599 Custom", "HTTP/1.1", 599, "Custom"),
        ("HTTP/1.1 200 caf\xe9 \t ok", "HTTP/1.1", 200, "caf\xe9 \t ok"),
    ],
)
def test_status_line(status_line: str, version: str, status: int, reason: str) -> None:
    response = parse_response_head(message(status_line, "Content-Length: 0"), "GET")
    assert (response.version, response.status, response.reason) == (version, status, reason)
    assert response.headers.fields == (("Content-Length", "0"),)


@pytest.mark.parametrize(
    ("status_line", "fields", "method", "framing"),
    [
        ("HTTP/1.1 100 Continue", [], "GET", NO_BODY),
        ("HTTP/1.1 101 Switching Protocols", ["Upgrade: websocket"], "GET", NO_BODY),
        ("HTTP/1.1 103 Early Hints", ["Content-Length: 10"], "GET", NO_BODY),
        ("HTTP/1.1 204 No Content", ["Content-Length: 10"], "GET", NO_BODY),
        ("HTTP/1.1 304 Not Modified", ["Transfer-Encoding: chunked"], "GET", NO_BODY),
        ("HTTP/1.1 200 OK", ["Content-Length: 10"], "HEAD", NO_BODY),
        ("HTTP/1.1 200 OK", ["Transfer-Encoding: chunked"], "HEAD", NO_BODY),
        ("HTTP/1.1 404 Not Found", [], "HEAD", NO_BODY),
        ("HTTP/1.1 200 OK", ["Content-Length: 10"], "GET", Framing("length", 10)),
        ("HTTP/1.1 200 OK", ["Content-Length: 0"], "GET", Framing("length", 0)),
        (
            "HTTP/1.1 200 OK",
            ["Content-Length: 7", "content-length: 7"],
            "POST",
            Framing("length", 7),
        ),
        ("HTTP/1.1 200 OK", [], "GET", Framing("close")),
        ("HTTP/1.0 200 OK", [], "GET", Framing("close")),
        ("HTTP/1.1 500 Internal Server Error", ["Connection: close"], "GET", Framing("close")),
        ("HTTP/1.1 200 OK", ["Transfer-Encoding: chunked"], "GET", Framing("chunked")),
        ("HTTP/1.1 200 OK", ["Transfer-Encoding: gzip, Chunked"], "GET", Framing("chunked")),
        (
            "HTTP/1.1 200 OK",
            ["Transfer-Encoding: gzip", "Transfer-Encoding: chunked"],
            "GET",
            Framing("chunked"),
        ),
        ("HTTP/1.1 200 OK", ["Transfer-Encoding: chunked, gzip"], "GET", Framing("close")),
        ("HTTP/1.1 200 OK", ["Transfer-Encoding: gzip"], "GET", Framing("close")),
        (
            "HTTP/1.1 200 OK",
            ["Transfer-Encoding: chunked", "Content-Length: 10"],
            "GET",
            Framing("chunked"),
        ),
    ],
)
def test_response_framing(
    status_line: str, fields: list[str], method: str, framing: Framing
) -> None:
    assert parse_response_head(message(status_line, *fields), method).framing == framing


@pytest.mark.parametrize(
    ("status_line", "fields", "keep_alive"),
    [
        ("HTTP/1.1 200 OK", ["Content-Length: 0"], True),
        ("HTTP/1.1 200 OK", ["Content-Length: 0", "Connection: keep-alive"], True),
        ("HTTP/1.1 200 OK", ["Content-Length: 0", "Connection: close"], False),
        ("HTTP/1.1 200 OK", [], False),
        ("HTTP/1.1 200 OK", ["Transfer-Encoding: chunked"], True),
        ("HTTP/1.1 200 OK", ["Transfer-Encoding: gzip"], False),
        ("HTTP/1.1 204 No Content", [], True),
        ("HTTP/1.0 200 OK", ["Content-Length: 0"], False),
        ("HTTP/1.0 200 OK", ["Content-Length: 0", "Connection: Keep-Alive"], True),
        ("HTTP/1.0 200 OK", ["Connection: keep-alive"], False),
    ],
)
def test_response_keep_alive(status_line: str, fields: list[str], keep_alive: bool) -> None:
    assert parse_response_head(message(status_line, *fields), "GET").keep_alive is keep_alive


@pytest.mark.parametrize(
    "head",
    [
        pytest.param(message("HTTP/1.1 20 OK"), id="two-digit-status"),
        pytest.param(message("HTTP/1.1 2000 OK"), id="four-digit-status"),
        pytest.param(message("HTTP/1.1 abc OK"), id="letters-status"),
        pytest.param(message("HTTP/1.1"), id="no-status"),
        pytest.param(message("HTTP/2 200 OK"), id="HTTP/2"),
        pytest.param(message("HTTP/2.0 200 OK"), id="HTTP/2.0"),
        pytest.param(message("HTTP/1.2 200 OK"), id="HTTP/1.2"),
        pytest.param(message("http/1.1 200 OK"), id="lowercase"),
        pytest.param(message("HTTP/1.1  200 OK"), id="double-space"),
        pytest.param(message(" HTTP/1.1 200 OK"), id="leading-space"),
        pytest.param(message("HTTP/1.1\t200 OK"), id="tab-before-status"),
        pytest.param(message("HTTP/1.1 200\tOK"), id="tab-after-status"),
        pytest.param(message("HTTP/1.1 200 OK\x00"), id="NUL-in-reason"),
        pytest.param(message("HTTP/1.1 200 O\x7fK"), id="DEL-in-reason"),
        pytest.param(message("ICY 200 OK"), id="ICY"),
        pytest.param(message("GET / HTTP/1.1"), id="a-request"),
        pytest.param(b"\r\n\r\n", id="empty"),
    ],
)
def test_malformed_status_line_is_502(head: bytes) -> None:
    error = refusal(lambda: parse_response_head(head, "GET"))
    assert error.status == 502
    assert "status line" in error.message


@pytest.mark.parametrize(
    "head",
    [
        pytest.param(message("HTTP/1.1 200 OK", "Bad Header"), id="no-colon"),
        pytest.param(message("HTTP/1.1 200 OK", "X : y"), id="space-before-colon"),
        pytest.param(message("HTTP/1.1 200 OK", "X: a", " folded"), id="obs-fold"),
        pytest.param(message("HTTP/1.1 200 OK", "X: a\x00"), id="NUL-in-value"),
        pytest.param(b"HTTP/1.1 200 OK\r\nX: a\nY: b\r\n\r\n", id="bare-LF"),
        pytest.param(
            message("HTTP/1.1 200 OK", "Content-Length: 1", "Content-Length: 2"),
            id="conflicting-CL",
        ),
        pytest.param(message("HTTP/1.1 200 OK", "Content-Length: abc"), id="non-numeric-CL"),
    ],
)
def test_malformed_upstream_response_is_a_bad_gateway(head: bytes) -> None:
    """Defect: an upstream's malformed fields or framing are answered with 400.

    Only a bad status line gives 502; everything ``_split_lines``, ``_parse_fields``
    and ``_content_length`` raise is ``HttpError(400, ...)``, and the server answers
    the client with that status, blaming the client for the upstream's fault. E.g.
    ``b"HTTP/1.1 200 OK\\r\\nContent-Length: 1\\r\\nContent-Length: 2\\r\\n\\r\\n"``:
    expected 502, actual 400.
    """
    assert refusal(lambda: parse_response_head(head, "GET")).status == 502


@pytest.mark.parametrize("status_line", ["HTTP/1.1 000 Zero", "HTTP/1.1 099 Low"])
def test_status_code_below_100_is_refused(status_line: str) -> None:
    """Defect: status codes 000-099 are accepted and treated as interim (1xx) responses.

    RFC 9110 §15 allows 100..599 only. ``HTTP/1.1 000 Zero`` parses as status 0 with
    no body; the server then relays it as an interim response, rendered by
    ``render_forward_response`` as the invalid ``HTTP/1.1 0 Zero``, and waits for a
    "final" response. Expected: HttpError 502.
    """
    assert refusal(lambda: parse_response_head(message(status_line), "GET")).status == 502


def test_connect_established_is_a_200() -> None:
    response = parse_response_head(CONNECT_ESTABLISHED, "CONNECT")
    assert (response.status, response.reason) == (200, "Connection established")
    assert find_head_end(CONNECT_ESTABLISHED) == len(CONNECT_ESTABLISHED)


# --------------------------------------------------------------------------------------
# BodyTracker: length, none, close


def test_length_body_across_many_feeds() -> None:
    tracker = BodyTracker(Framing("length", 10))
    assert tracker.kind == "length"
    assert not is_done(tracker)
    assert tracker.feed(b"") == 0
    assert tracker.feed(b"abc") == 3
    assert not is_done(tracker)
    assert tracker.feed(bytearray(b"defg")) == 4
    assert not is_done(tracker)
    assert tracker.feed(b"hijNEXT") == 3
    assert is_done(tracker)
    assert tracker.feed(b"more") == 0


def test_length_body_byte_by_byte() -> None:
    tracker = BodyTracker(Framing("length", 5))
    taken = [tracker.feed(bytes([byte])) for byte in b"helloXY"]
    assert taken == [1, 1, 1, 1, 1, 0, 0]
    assert is_done(tracker)


@pytest.mark.parametrize("framing", [Framing("length", 0), NO_BODY])
def test_empty_bodies_are_done_at_once(framing: Framing) -> None:
    tracker = BodyTracker(framing)
    assert is_done(tracker)
    assert tracker.feed(b"GET / HTTP/1.1\r\n\r\n") == 0
    assert is_done(tracker)


def test_close_framing_takes_everything_and_never_ends() -> None:
    tracker = BodyTracker(Framing("close"))
    for data in (b"", b"abc", b"0\r\n\r\n", b"GET / HTTP/1.1\r\n\r\n", bytes(range(256))):
        assert tracker.feed(data) == len(data)
        assert not is_done(tracker)


# --------------------------------------------------------------------------------------
# BodyTracker: chunked

NEXT_MESSAGE = b"GET / HTTP/1.1\r\n\r\n"

CHUNKED_BODIES = [
    pytest.param(b"0\r\n\r\n", id="empty"),
    pytest.param(b"5\r\nhello\r\n0\r\n\r\n", id="one-chunk"),
    pytest.param(b'5;name=value\r\nhello\r\n6 ; ext="q;d"\r\n world\r\n0\r\n\r\n', id="extensions"),
    pytest.param(
        b"a\r\n0123456789\r\nF\r\n"
        + b"x" * 15
        + b"\r\n0;last\r\nExpires: never\r\nX-Trailer:  1 \r\n\r\n",
        id="hex-sizes-and-trailers",
    ),
    pytest.param(b"4\r\n\r\n\r\n\r\n1\r\n\n\r\n0\r\n\r\n", id="data-looks-like-line-ends"),
    pytest.param(b"0004\r\n0\r\n\r\r\n00\r\n\r\n", id="data-looks-like-the-end"),
]


@pytest.mark.parametrize("body", CHUNKED_BODIES)
def test_chunked_body_fed_whole(body: bytes) -> None:
    tracker = BodyTracker(Framing("chunked"))
    assert not is_done(tracker)
    assert tracker.feed(body + NEXT_MESSAGE) == len(body)
    assert is_done(tracker)
    assert tracker.feed(NEXT_MESSAGE) == 0


@pytest.mark.parametrize("body", CHUNKED_BODIES)
def test_chunked_body_fed_byte_by_byte(body: bytes) -> None:
    tracker = BodyTracker(Framing("chunked"))
    data = body + NEXT_MESSAGE
    for index in range(len(data)):
        taken = tracker.feed(data[index : index + 1])
        assert taken == (1 if index < len(body) else 0), index
        assert is_done(tracker) is (index >= len(body) - 1), index


@pytest.mark.parametrize("body", CHUNKED_BODIES)
def test_chunked_body_split_at_every_pair_of_positions(body: bytes) -> None:
    data = body + NEXT_MESSAGE
    for first in range(len(data) + 1):
        for second in range(first, len(data) + 1):
            tracker = BodyTracker(Framing("chunked"))
            taken = tracker.feed(data[:first])
            assert taken == min(first, len(body)), (first, second)
            assert is_done(tracker) is (first >= len(body)), (first, second)
            taken += tracker.feed(data[first:second])
            assert taken == min(second, len(body)), (first, second)
            assert is_done(tracker) is (second >= len(body)), (first, second)
            taken += tracker.feed(data[second:])
            assert taken == len(body), (first, second)
            assert is_done(tracker)


def test_chunk_line_of_exactly_the_limit_is_accepted() -> None:
    size_line = b"1;" + b"e" * (MAX_CHUNK_LINE - 4) + b"\r\n"
    assert len(size_line) == MAX_CHUNK_LINE
    body = size_line + b"x\r\n0\r\n\r\n"
    tracker = BodyTracker(Framing("chunked"))
    assert tracker.feed(body) == len(body)
    assert is_done(tracker)


CHUNKED_ERRORS = [
    pytest.param(b"x\r\n", id="size-not-hex"),
    pytest.param(b"\r\n", id="empty-size-line"),
    pytest.param(b" 5\r\nhello\r\n0\r\n\r\n", id="space-before-size"),
    pytest.param(b"-5\r\n", id="negative-size"),
    pytest.param(b"0x5\r\n", id="0x-prefix"),
    pytest.param(b"5\nhello\r\n0\r\n\r\n", id="bare-LF-after-size"),
    pytest.param(b"5\r\r\nhello\r\n0\r\n\r\n", id="CR-in-size-line"),
    pytest.param(b"5;\x01\r\nhello\r\n0\r\n\r\n", id="control-in-extension"),
    pytest.param(b"5 x\r\nhello\r\n0\r\n\r\n", id="junk-after-size"),
    pytest.param(b"1234567890abcdef\r\n", id="16-hex-digits"),
    pytest.param(b"5\r\nhelloX\r\n0\r\n\r\n", id="data-longer-than-size"),
    pytest.param(b"5\r\nhello0\r\n\r\n", id="no-CRLF-after-data"),
    pytest.param(b"5\r\nhello\n0\r\n\r\n", id="bare-LF-after-data"),
    pytest.param(b"0\r\nBad Trailer\r\n\r\n", id="trailer-without-colon"),
    pytest.param(b"0\r\nX : y\r\n\r\n", id="trailer-space-before-colon"),
    pytest.param(b"0\r\nX: y\r\n folded\r\n\r\n", id="trailer-obs-fold"),
    pytest.param(b"0\r\nX: y\n\r\n", id="trailer-bare-LF"),
    pytest.param(b"0\r\n\n", id="final-bare-LF"),
    pytest.param(b"1;" + b"e" * (MAX_CHUNK_LINE - 3) + b"\r\n", id="size-line-one-over"),
    pytest.param(b"1;" + b"e" * (MAX_CHUNK_LINE + 10), id="size-line-never-ends"),
    pytest.param(b"0\r\nX: " + b"v" * MAX_CHUNK_LINE + b"\r\n\r\n", id="trailer-too-long"),
    pytest.param(b"1\r\nx" + b"y" * (MAX_CHUNK_LINE + 10), id="data-overrun-never-ends"),
]


@pytest.mark.parametrize("data", CHUNKED_ERRORS)
def test_malformed_chunked_body_is_400_whole(data: bytes) -> None:
    assert refusal(lambda: BodyTracker(Framing("chunked")).feed(data)).status == 400


@pytest.mark.parametrize("data", CHUNKED_ERRORS)
def test_malformed_chunked_body_is_400_byte_by_byte(data: bytes) -> None:
    tracker = BodyTracker(Framing("chunked"))

    def feed_all() -> None:
        for index in range(len(data)):
            assert tracker.feed(data[index : index + 1]) == 1
            assert not is_done(tracker)

    assert refusal(feed_all).status == 400


# --------------------------------------------------------------------------------------
# render_forward_request


def forward(raw: bytes) -> bytes:
    head = parse_request_head(raw)
    return render_forward_request(head, parse_target(head))


def test_forward_request_strips_hop_by_hop_and_proxy_fields() -> None:
    raw = message(
        "GET http://example.com/a?b=1 HTTP/1.1",
        "Host: elsewhere.example",
        "User-Agent: test/1",
        "Proxy-Authorization: Basic dG9rZW4=",
        "Proxy-Connection: keep-alive",
        "Connection: Keep-Alive, X-Private",
        "Keep-Alive: timeout=5",
        "X-Private: secret",
        "TE: trailers",
        "Trailer: Expires",
        "Upgrade: h2c",
        "host: another.example",
        "Accept: */*",
    )
    assert forward(raw) == (
        b"GET /a?b=1 HTTP/1.1\r\nHost: example.com\r\nUser-Agent: test/1\r\nAccept: */*\r\n\r\n"
    )


@pytest.mark.parametrize(
    ("url", "host"),
    [
        ("http://example.com/", "example.com"),
        ("http://example.com:80/", "example.com"),
        ("http://example.com:8080/", "example.com:8080"),
        ("http://example.com:180/", "example.com:180"),
        ("http://example.com:1080/", "example.com:1080"),
        ("http://example.com:8/", "example.com:8"),
        ("http://Example.COM/", "Example.COM"),
        ("http://[::1]/", "[::1]"),
        ("http://[::1]:80/", "[::1]"),
        ("http://[2001:db8::1]:8080/", "[2001:db8::1]:8080"),
        ("http://10.0.0.1:81/", "10.0.0.1:81"),
    ],
)
def test_forward_request_host_comes_from_the_url(url: str, host: str) -> None:
    assert (
        forward(message(f"GET {url} HTTP/1.1"))
        == f"GET / HTTP/1.1\r\nHost: {host}\r\n\r\n".encode()
    )


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        pytest.param(
            message("GET http://example.com HTTP/1.0"),
            b"GET / HTTP/1.1\r\nHost: example.com\r\n\r\n",
            id="http-1.0-nothing-added",
        ),
        pytest.param(
            message("GET http://example.com?q=1 HTTP/1.1", "Accept: */*"),
            b"GET /?q=1 HTTP/1.1\r\nHost: example.com\r\nAccept: */*\r\n\r\n",
            id="query-only",
        ),
        pytest.param(
            message(
                "POST http://example.com/up HTTP/1.1",
                "Transfer-Encoding: chunked",
                "Content-Type: text/plain",
            ),
            b"POST /up HTTP/1.1\r\nHost: example.com\r\nTransfer-Encoding: chunked\r\n"
            b"Content-Type: text/plain\r\n\r\n",
            id="chunked-kept",
        ),
        pytest.param(
            message("PUT http://example.com/x HTTP/1.1", "Content-Length: 5", "X-Latin: \xe9"),
            b"PUT /x HTTP/1.1\r\nHost: example.com\r\nContent-Length: 5\r\nX-Latin: \xe9\r\n\r\n",
            id="length-kept-latin-1-round-trip",
        ),
    ],
)
def test_forward_request_bytes(raw: bytes, expected: bytes) -> None:
    assert forward(raw) == expected


@pytest.mark.parametrize(
    "raw",
    [
        message("GET http://example.com/ HTTP/1.1"),
        message("POST http://example.com/ HTTP/1.1", "Content-Length: 5"),
        message("POST http://example.com/ HTTP/1.1", "Transfer-Encoding: chunked"),
        message("POST http://example.com/ HTTP/1.1", "Content-Length: 5", "Connection: close"),
    ],
)
def test_forwarded_request_is_framed_like_the_received_one(raw: bytes) -> None:
    head = parse_request_head(raw)
    assert parse_request_head(forward(raw)).framing == head.framing


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param(
            message(
                "POST http://example.com/ HTTP/1.1",
                "Content-Length: 5",
                "Connection: content-length",
            ),
            id="Connection-names-Content-Length",
        ),
        pytest.param(
            message(
                "POST http://example.com/ HTTP/1.1",
                "Transfer-Encoding: chunked",
                "Connection: Transfer-Encoding",
            ),
            id="Connection-names-Transfer-Encoding",
        ),
    ],
)
def test_connection_cannot_strip_the_request_framing(raw: bytes) -> None:
    """Defect (request smuggling): Connection can remove the body's framing field.

    ``without_hop_by_hop`` drops every field named in ``Connection``, including
    Content-Length and Transfer-Encoding. For
    ``POST http://example.com/ HTTP/1.1 / Content-Length: 5 / Connection: content-length``
    the proxy tracks a 5-byte body but sends upstream ``POST / HTTP/1.1 / Host:
    example.com`` with no framing, so the upstream reads the relayed body bytes as
    the next request. Expected: refuse with 400, or forward the framing field.
    """
    head = parsed_or_refused(lambda: parse_request_head(raw), 400)
    if head is not None:
        assert parse_request_head(forward(raw)).framing == head.framing


# --------------------------------------------------------------------------------------
# render_forward_response and render_response

UPSTREAM_RESPONSE = message(
    "HTTP/1.1 200 OK",
    "Content-Type: text/plain",
    "Connection: keep-alive, X-Hop",
    "X-Hop: 1",
    "Keep-Alive: timeout=5",
    "Transfer-Encoding: chunked",
    "Proxy-Authenticate: Basic",
    "Trailer: Expires",
    "Set-Cookie: a=1",
    "Set-Cookie: b=2",
)


def test_forward_response_keep_alive() -> None:
    response = parse_response_head(UPSTREAM_RESPONSE, "GET")
    assert render_forward_response(response, close=False) == (
        b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n"
        b"Set-Cookie: a=1\r\nSet-Cookie: b=2\r\n\r\n"
    )


def test_forward_response_close() -> None:
    response = parse_response_head(UPSTREAM_RESPONSE, "GET")
    assert render_forward_response(response, close=True) == (
        b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n"
        b"Set-Cookie: a=1\r\nSet-Cookie: b=2\r\nConnection: close\r\n\r\n"
    )


@pytest.mark.parametrize(
    ("status_line", "rendered"),
    [
        ("HTTP/1.1 404", b"HTTP/1.1 404 Not Found\r\n"),
        ("HTTP/1.1 502 ", b"HTTP/1.1 502 Bad Gateway\r\n"),
        ("HTTP/1.0 200 OK", b"HTTP/1.1 200 OK\r\n"),
        ("HTTP/1.1 200 Fine Thanks", b"HTTP/1.1 200 Fine Thanks\r\n"),
        ("HTTP/1.1 299 Custom", b"HTTP/1.1 299 Custom\r\n"),
        ("HTTP/1.1 100 Continue", b"HTTP/1.1 100 Continue\r\n"),
    ],
)
def test_forward_response_status_line(status_line: str, rendered: bytes) -> None:
    response = parse_response_head(message(status_line, "Content-Length: 0"), "GET")
    assert render_forward_response(response, close=False) == rendered + (
        b"Content-Length: 0\r\n\r\n"
    )


def test_connection_cannot_strip_the_response_framing() -> None:
    """Defect: an upstream's Connection field can remove the response's Content-Length.

    ``HTTP/1.1 200 OK / Content-Length: 5 / Connection: content-length`` is tracked
    as a 5-byte body, but ``render_forward_response(close=False)`` drops
    Content-Length, so a keep-alive client sees a close-delimited body on a
    connection the proxy keeps open. Expected: the forwarded head keeps the framing
    (or parse refuses it with 502).
    """
    head = message("HTTP/1.1 200 OK", "Content-Length: 5", "Connection: content-length")
    response = parsed_or_refused(lambda: parse_response_head(head, "GET"), 502)
    if response is None:
        return
    forwarded = parse_response_head(render_forward_response(response, close=False), "GET")
    assert forwarded.framing == response.framing


def test_chunked_response_is_forwarded_without_content_length() -> None:
    """Defect: a response with both Transfer-Encoding and Content-Length keeps both.

    RFC 9112 §6.3: an intermediary that forwards such a message MUST first remove the
    received Content-Length. ``HTTP/1.1 200 OK / Transfer-Encoding: chunked /
    Content-Length: 5`` is tracked as chunked but forwarded with ``Content-Length: 5``
    still in it. Expected: no Content-Length downstream (or a 502).
    """
    head = message("HTTP/1.1 200 OK", "Transfer-Encoding: chunked", "Content-Length: 5")
    response = parsed_or_refused(lambda: parse_response_head(head, "GET"), 502)
    if response is None:
        return
    forwarded = parse_response_head(render_forward_response(response, close=False), "GET")
    assert forwarded.headers.get_all("content-length") == []


def test_render_response_exact_bytes() -> None:
    assert render_response(403, "denied") == (
        b"HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain; charset=utf-8\r\n"
        b"Content-Length: 6\r\nConnection: close\r\n\r\ndenied"
    )


@pytest.mark.parametrize("body", ["", "ascii", "h\xe9llo \u2713 \u65e5\u672c", "\U0001f600\n"])
def test_render_response_length_counts_utf8_bytes(body: str) -> None:
    payload = body.encode("utf-8")
    rendered = render_response(200, body)
    end = find_head_end(rendered)
    assert rendered[end:] == payload
    response = parse_response_head(rendered[:end], "GET")
    assert response.framing == Framing("length", len(payload))
    assert response.headers.get("Content-Length") == str(len(payload))
    assert response.headers.get("Connection") == "close"
    assert not response.keep_alive


def test_render_response_extra_headers_and_keep_alive() -> None:
    rendered = render_response(
        407,
        "token needed",
        headers=[("Proxy-Authenticate", 'Basic realm="cloister"')],
        close=False,
    )
    assert rendered == (
        b"HTTP/1.1 407 Proxy Authentication Required\r\n"
        b"Content-Type: text/plain; charset=utf-8\r\nContent-Length: 12\r\n"
        b'Proxy-Authenticate: Basic realm="cloister"\r\n\r\ntoken needed'
    )
    assert parse_response_head(rendered[: find_head_end(rendered)], "GET").keep_alive


def test_render_response_unknown_status_still_parses() -> None:
    rendered = render_response(418, "tea")
    response = parse_response_head(rendered[: find_head_end(rendered)], "GET")
    assert (response.status, response.framing) == (418, Framing("length", 3))


# --------------------------------------------------------------------------------------
# Never hang: header whitespace and regex backtracking

_PARSE_IN_CHILD = """
import sys
from cloister_proxy.http1 import (
    BodyTracker, Framing, HttpError, parse_request_head, parse_response_head,
)

kind, data = sys.argv[1], sys.stdin.buffer.read()
try:
    if kind == "request":
        parse_request_head(data)
    elif kind == "response":
        parse_response_head(data, "GET")
    else:
        BodyTracker(Framing("chunked")).feed(data)
except HttpError as error:
    print(error.status)
"""

CHILD_BUDGET_SECONDS = 3


@pytest.mark.parametrize(
    ("kind", "data"),
    [
        pytest.param(
            "request",
            b"GET / HTTP/1.1\r\nX:" + b" " * (MAX_HEAD_BYTES - 40) + b"\x01\r\n\r\n",
            id="request-field",
        ),
        pytest.param(
            "response",
            b"HTTP/1.1 200 OK\r\nX:" + b" \t" * (MAX_HEAD_BYTES // 2 - 20) + b"\x00\r\n\r\n",
            id="response-field",
        ),
        pytest.param(
            "chunked",
            b"0\r\nX:" + b" " * (MAX_CHUNK_LINE - 10) + b"\x01\r\n\r\n",
            id="chunked-trailer",
        ),
    ],
)
def test_whitespace_run_in_a_field_cannot_stall_the_parser(kind: str, data: bytes) -> None:
    """Defect (denial of service): the field regex backtracks cubically on whitespace.

    ``_HEADER`` is ``name:[ \\t]*(value*?)[ \\t]*`` where the lazy value also matches
    spaces; when a line of n spaces/tabs ends in a forbidden control byte, fullmatch
    tries every split of the run, O(n^3). Measured: 1,000 spaces take ~1 s; a 16 KiB
    head (``GET / HTTP/1.1 / X:`` + 16,344 spaces + ``\\x01``) would take about an
    hour, and a 4 KiB chunked trailer line about a minute, all on the event loop's
    thread. Expected: HttpError 400 (or 502) within milliseconds. Each input is run in
    a child process with a budget so the failure is a failure, not a hung suite.
    """
    if kind != "chunked":
        assert find_head_end(data) == len(data) <= MAX_HEAD_BYTES
    try:
        child = subprocess.run(
            [sys.executable, "-c", _PARSE_IN_CHILD, kind],
            input=data,
            capture_output=True,
            timeout=CHILD_BUDGET_SECONDS,
            check=False,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"parsing a {len(data)}-byte {kind} took over {CHILD_BUDGET_SECONDS} s")
    assert child.returncode == 0, child.stderr.decode()
    assert 400 <= int(child.stdout) <= 599


# --------------------------------------------------------------------------------------
# Property tests: random, truncated and mutated input never crash or hang the parser

TOKEN_CHARS = "!#$%&'*+-.^_`|~" + string.ascii_letters + string.digits
tokens = st.text(alphabet=TOKEN_CHARS, min_size=1, max_size=12)
field_values = st.text(
    alphabet=st.characters(min_codepoint=0x20, max_codepoint=0xFF, exclude_characters="\x7f")
    | st.just("\t"),
    max_size=24,
)
hosts = st.one_of(
    st.from_regex(r"[a-z][a-z0-9-]{0,10}(\.[a-z]{2,6}){0,2}", fullmatch=True),
    st.ip_addresses(v=4).map(str),
    st.ip_addresses(v=6).map(lambda address: f"[{address}]"),
)
ports = st.one_of(st.integers(1, 65535), st.integers(0, 70000))
authorities = st.one_of(hosts, st.tuples(hosts, ports).map(lambda pair: f"{pair[0]}:{pair[1]}"))
paths = st.text(alphabet=string.ascii_letters + string.digits + "-._~!$&'()*+,;=:@/%?", max_size=20)
http_urls = st.tuples(st.sampled_from(["http://", "HTTP://"]), authorities, paths).map("".join)
other_urls = st.tuples(st.sampled_from(["https://", "ftp://"]), authorities, paths).map("".join)
targets = st.one_of(
    paths.map(lambda path: "/" + path),
    authorities,
    http_urls,
    http_urls,
    other_urls,
    st.just("*"),
)
methods = st.one_of(
    st.sampled_from(["GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "PATCH", "CONNECT"]),
    tokens,
)
framing_names = frozenset({"content-length", "transfer-encoding"})
plain_fields = st.tuples(
    tokens.filter(lambda name: name.lower() not in framing_names), field_values
)
any_fields = st.one_of(
    plain_fields,
    plain_fields,
    plain_fields,
    st.tuples(st.just("Content-Length"), st.integers(0, 10**6).map(str)),
    st.tuples(st.just("Transfer-Encoding"), st.sampled_from(["chunked", "gzip", "gzip, chunked"])),
    st.tuples(
        st.just("Connection"), st.sampled_from(["close", "keep-alive", "Upgrade, X-A", "te"])
    ),
    st.tuples(st.sampled_from(["Host", "Proxy-Authorization", "Keep-Alive", "TE"]), field_values),
)
piece_sizes = st.lists(st.integers(1, 64), max_size=40)
mutation_bytes = st.one_of(
    st.sampled_from(list(b"\r\n \t:\x00\x7f\xff@[]/?#;,0123456789")), st.integers(0, 255)
)


@st.composite
def request_heads(draw: st.DrawFn) -> bytes:
    versions = ["HTTP/1.1", "HTTP/1.1", "HTTP/1.0", "HTTP/2.0", "http/1.1"]
    version = draw(st.sampled_from(versions))
    fields = draw(st.lists(any_fields, max_size=6))
    return message(
        f"{draw(methods)} {draw(targets)} {version}",
        *(f"{name}: {value}" for name, value in fields),
    )


@st.composite
def mangled_messages(draw: st.DrawFn) -> bytes:
    """A generated head and a little body, intact, truncated or byte-mutated."""
    data = draw(request_heads()) + draw(st.binary(max_size=16))
    mode = draw(st.sampled_from(["intact", "truncated", "mutated"]))
    if mode == "truncated":
        return data[: draw(st.integers(0, len(data)))]
    if mode == "intact":
        return data
    buffer = bytearray(data)
    edits = st.tuples(st.sampled_from(["insert", "delete", "replace"]), st.integers(0, 1 << 16))
    for (operation, where), byte in draw(
        st.lists(st.tuples(edits, mutation_bytes), min_size=1, max_size=6)
    ):
        position = where % (len(buffer) + 1)
        if operation == "insert":
            buffer.insert(position, byte)
        elif position < len(buffer) and operation == "delete":
            del buffer[position]
        elif position < len(buffer):
            buffer[position] = byte
    return bytes(buffer)


def allowed(call: Callable[[], T]) -> T | None:
    """What *call* returns, or None when it refuses with an HttpError of 4xx/5xx."""
    try:
        return call()
    except HttpError as error:
        refused = error
    assert 400 <= refused.status <= 599, refused.status
    assert refused.message
    return None


def head_end_or_431(call: Callable[[], int]) -> int | None:
    return parsed_or_refused(call, 431)


def drive(data: bytes, sizes: Sequence[int]) -> None:
    """Feed *data* to the module the way the server does; only HttpError may come out."""
    whole = head_end_or_431(lambda: find_head_end(data))
    outcome = allowed(lambda: scan(split(data, sizes)))
    if outcome is None:
        assert whole is None
        return
    buffer, end = outcome
    assert end == whole
    if end < 0:
        assert buffer == data
        return
    assert 4 <= end <= MAX_HEAD_BYTES
    head = data[:end]
    assert buffer[:end] == head
    request = allowed(lambda: parse_request_head(head))
    if request is not None:
        assert request.version in ("HTTP/1.0", "HTTP/1.1")
        target = allowed(lambda: parse_target(request))
        if target is not None and target.kind == "forward":
            forwarded = render_forward_request(request, target)
            assert forwarded.startswith(
                f"{request.method} {target.path} HTTP/1.1\r\n".encode("latin-1")
            )
            assert parse_request_head(forwarded).method == request.method
        tracker = BodyTracker(request.framing)
        body = data[end:]
        taken = allowed(lambda: sum(tracker.feed(piece) for piece in split(body, sizes)))
        if taken is not None:
            assert 0 <= taken <= len(body)
    response = allowed(lambda: parse_response_head(head, "GET"))
    if response is not None:
        assert 0 <= response.status <= 999
        assert render_forward_response(response, close=True).startswith(b"HTTP/1.1 ")


@pytest.mark.timeout(60)
@settings(max_examples=400)
@given(data=st.binary(max_size=1024), sizes=piece_sizes)
@example(data=b"GET http://example.com/ HTTP/1.1\r\n\r\n", sizes=[1] * 40)
@example(data=b"CONNECT [::1]:443 HTTP/1.1\r\n\r\n", sizes=[])
@example(data=b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabc", sizes=[3, 3])
def test_arbitrary_bytes(data: bytes, sizes: list[int]) -> None:
    drive(data, sizes)


@pytest.mark.timeout(60)
@settings(max_examples=60)
@given(
    prefix=st.binary(max_size=64),
    filler=st.integers(MAX_HEAD_BYTES - 128, MAX_HEAD_BYTES + 64),
    suffix=st.binary(max_size=64),
    sizes=st.lists(st.integers(1, 8192), max_size=8),
)
@example(prefix=b"GET / HTTP/1.1\r\nX: ", filler=MAX_HEAD_BYTES, suffix=b"\r\n\r\n", sizes=[])
def test_arbitrary_bytes_around_the_limit(
    prefix: bytes, filler: int, suffix: bytes, sizes: list[int]
) -> None:
    drive(prefix + b"a" * filler + suffix, sizes)


@pytest.mark.timeout(60)
@settings(max_examples=500)
@given(data=mangled_messages(), sizes=piece_sizes)
def test_mangled_request_heads(data: bytes, sizes: list[int]) -> None:
    drive(data, sizes)


@pytest.mark.timeout(60)
@settings(max_examples=200)
@given(
    method=methods,
    target=targets,
    version=st.sampled_from(["HTTP/1.0", "HTTP/1.1"]),
    fields=st.lists(plain_fields, max_size=8),
)
def test_generated_heads_parse_exactly(
    method: str, target: str, version: str, fields: list[tuple[str, str]]
) -> None:
    raw = message(f"{method} {target} {version}", *(f"{name}: {value}" for name, value in fields))
    assert find_head_end(raw + b"tail") == len(raw)
    head = parse_request_head(raw)
    assert (head.method, head.target, head.version) == (method, target, version)
    assert head.headers.fields == tuple((name, value.strip(" \t")) for name, value in fields)
    assert head.framing == NO_BODY


# --------------------------------------------------------------------------------------
# Property tests: BodyTracker


@st.composite
def chunked_bodies(draw: st.DrawFn) -> bytes:
    extensions = st.sampled_from(["", ";a=b", ' ; name="v"', "\t;x", ";"])
    body = bytearray()
    for chunk in draw(st.lists(st.binary(min_size=1, max_size=40), max_size=5)):
        size = f"{len(chunk):x}"
        if draw(st.booleans()):
            size = size.upper()
        size = "0" * draw(st.integers(0, 2)) + size
        body += f"{size}{draw(extensions)}\r\n".encode() + chunk + b"\r\n"
    body += f"0{draw(extensions)}\r\n".encode()
    trailer_values = st.text(
        alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=10
    )
    for name, value in draw(st.lists(st.tuples(tokens, trailer_values), max_size=3)):
        body += f"{name}: {value}\r\n".encode()
    return bytes(body + b"\r\n")


@st.composite
def mangled_chunked_bodies(draw: st.DrawFn) -> bytes:
    data = bytearray(draw(chunked_bodies()) + draw(st.binary(max_size=8)))
    for position, byte in draw(
        st.lists(st.tuples(st.integers(0, 1 << 16), mutation_bytes), max_size=4)
    ):
        data.insert(position % (len(data) + 1), byte)
    if draw(st.booleans()):
        del data[draw(st.integers(0, len(data))) :]
    return bytes(data)


def track(framing: Framing, pieces: Sequence[bytes]) -> tuple[int, bool] | None:
    """(bytes consumed, done) over *pieces*, or None when the tracker refused with 400."""
    tracker = BodyTracker(framing)

    def feed_all() -> tuple[int, bool]:
        total = 0
        for piece in pieces:
            was_done = is_done(tracker)
            taken = tracker.feed(piece)
            assert 0 <= taken <= len(piece)
            if was_done:
                assert taken == 0
            if taken < len(piece):
                assert is_done(tracker)
            total += taken
        return total, is_done(tracker)

    return parsed_or_refused(feed_all, 400)


@pytest.mark.timeout(60)
@settings(max_examples=400)
@given(
    data=st.one_of(st.binary(max_size=512), mangled_chunked_bodies()),
    sizes=piece_sizes,
)
@example(data=b"5\r\nhello\r\n0\r\n\r\nGET", sizes=[1] * 30)
@example(data=b"0\r\nX: y\r", sizes=[7, 1])
def test_chunked_tracker_on_random_input(data: bytes, sizes: list[int]) -> None:
    whole = track(Framing("chunked"), [data])
    pieces = track(Framing("chunked"), split(data, sizes))
    assert whole == pieces
    if whole is not None:
        assert whole[0] <= len(data)
        if not whole[1]:
            assert whole[0] == len(data)


@pytest.mark.timeout(60)
@settings(max_examples=200)
@given(body=chunked_bodies(), tail=st.binary(max_size=32), sizes=piece_sizes)
def test_valid_chunked_bodies_end_exactly(body: bytes, tail: bytes, sizes: list[int]) -> None:
    assert track(Framing("chunked"), [body + tail]) == (len(body), True)
    assert track(Framing("chunked"), split(body + tail, sizes)) == (len(body), True)
    assert track(Framing("chunked"), split(body[:-1], sizes)) == (len(body) - 1, False)


@pytest.mark.timeout(60)
@settings(max_examples=100)
@given(length=st.integers(0, 300), data=st.binary(max_size=400), sizes=piece_sizes)
def test_length_tracker_on_random_input(length: int, data: bytes, sizes: list[int]) -> None:
    expected = (min(length, len(data)), len(data) >= length)
    assert track(Framing("length", length), [data]) == expected
    assert track(Framing("length", length), split(data, sizes)) == expected
