"""HTTP/1.x for a forward proxy, sans I/O: bytes in, parsed values (or errors) out.

Everything here is pure and synchronous, so it is tested with byte strings; the one
module that touches sockets (:mod:`cloister_proxy.server`) feeds it.

The parser is deliberately strict, because a proxy that reads a message differently
from the server behind it is how request smuggling happens:

* lines end in CRLF only (a bare LF or CR is an error), no obsolete line folding, no
  whitespace between a header name and its colon, no control characters in values;
* ``Content-Length`` must be one decimal number (repeats must agree); the only
  ``Transfer-Encoding`` accepted on a request is ``chunked``; both at once is an error;
* the head, request line included, is at most :data:`MAX_HEAD_BYTES` (16 KiB), beyond
  which the answer is 431.

Bodies are never buffered: :class:`BodyTracker` follows the framing of a body that is
relayed as-is and says where the message ends, so keep-alive and pipelining work
without copying the payload.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal, NamedTuple

MAX_HEAD_BYTES = 16 * 1024
MAX_CHUNK_LINE = 4096

HttpVersion = Literal["HTTP/1.0", "HTTP/1.1"]
FramingKind = Literal["none", "length", "chunked", "close"]
TargetKind = Literal["connect", "forward", "origin"]

_TOKEN = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_REQUEST_LINE = re.compile(rb"([!#$%&'*+\-.^_`|~0-9A-Za-z]+) ([^\x00-\x20\x7f]+) (HTTP/\d\.\d)")
_STATUS_LINE = re.compile(rb"(HTTP/1\.[01]) ([1-5]\d\d)(?: ([^\x00-\x08\x0a-\x1f\x7f]*))?")
# Linear on purpose: no two adjacent quantifiers that can trade characters, so a long
# run of spaces cannot make the match backtrack (field values are stripped in code).
_FIELD_NAME = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_FORBIDDEN_IN_VALUE = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")
_DIGITS = re.compile(r"[0-9]{1,18}")
_CHUNK_SIZE = re.compile(rb"([0-9A-Fa-f]{1,15})[ \t]*(?:;[^\x00-\x08\x0a-\x1f\x7f]*)?")

# Hop-by-hop headers (RFC 9110 §7.6.1) plus the proxy's own; never forwarded.
# Transfer-Encoding is kept: bodies are relayed with their framing unchanged.
# The framing fields can never be removed by naming them in Connection: the body is
# relayed with the framing the proxy parsed, so the next hop must see the same.
HOP_BY_HOP = frozenset(
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
FRAMING_FIELDS = frozenset({"content-length", "transfer-encoding"})

STATUS_PHRASES = {
    200: "OK",
    400: "Bad Request",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    407: "Proxy Authentication Required",
    408: "Request Timeout",
    429: "Too Many Requests",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
    502: "Bad Gateway",
    503: "Service Unavailable",
    504: "Gateway Timeout",
    505: "HTTP Version Not Supported",
}


class HttpError(Exception):
    """A message this proxy will not handle, and the status to answer with."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class Framing(NamedTuple):
    """How a message body is delimited."""

    kind: FramingKind
    length: int = 0


NO_BODY = Framing("none")


@dataclass(frozen=True, slots=True)
class Headers:
    """Header fields in order, names as received; lookups are case-insensitive."""

    fields: tuple[tuple[str, str], ...]

    def get_all(self, name: str) -> list[str]:
        lowered = name.lower()
        return [value for key, value in self.fields if key.lower() == lowered]

    def get(self, name: str) -> str | None:
        """The only value of *name*, None if absent; several values are an error."""
        values = self.get_all(name)
        if not values:
            return None
        if len(values) > 1:
            raise HttpError(400, f"more than one {name} header")
        return values[0]

    def connection_tokens(self) -> frozenset[str]:
        return frozenset(
            token.strip().lower()
            for value in self.get_all("connection")
            for token in value.split(",")
            if token.strip()
        )

    def without_hop_by_hop(self, also: Iterable[str] = ()) -> list[tuple[str, str]]:
        """Fields minus hop-by-hop ones and those named in ``Connection``."""
        drop = (HOP_BY_HOP | self.connection_tokens() | {name.lower() for name in also}) - (
            FRAMING_FIELDS - {name.lower() for name in also}
        )
        return [(key, value) for key, value in self.fields if key.lower() not in drop]


@dataclass(frozen=True, slots=True)
class RequestHead:
    method: str
    target: str
    version: HttpVersion
    headers: Headers
    framing: Framing

    @property
    def keep_alive(self) -> bool:
        tokens = self.headers.connection_tokens()
        if self.version == "HTTP/1.0":
            return "keep-alive" in tokens
        return "close" not in tokens


@dataclass(frozen=True, slots=True)
class ResponseHead:
    version: str
    status: int
    reason: str
    headers: Headers
    framing: Framing

    @property
    def keep_alive(self) -> bool:
        if self.framing.kind == "close":
            return False
        tokens = self.headers.connection_tokens()
        if self.version == "HTTP/1.0":
            return "keep-alive" in tokens
        return "close" not in tokens


@dataclass(frozen=True, slots=True)
class ProxyTarget:
    """Where a request wants to go.

    ``connect``: authority-form (``CONNECT host:port``). ``forward``: absolute-form
    ``http://host[:port]/path`` (``path`` is the origin-form to send upstream).
    ``origin``: origin-form (``GET /healthz``), a request for the proxy itself.
    """

    kind: TargetKind
    host: str = ""
    port: int = 0
    path: str = ""

    @property
    def authority(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


def find_head_end(buffer: bytes | bytearray, start: int = 0) -> int:
    """Index just past the head's terminating CRLFCRLF, or -1 if not there yet.

    Raises 431 once the head is longer than :data:`MAX_HEAD_BYTES`.
    """
    end = buffer.find(b"\r\n\r\n", max(0, start - 3))
    if end < 0:
        if len(buffer) > MAX_HEAD_BYTES:
            raise HttpError(431, f"request head is larger than {MAX_HEAD_BYTES} bytes")
        return -1
    end += 4
    if end > MAX_HEAD_BYTES:
        raise HttpError(431, f"request head is larger than {MAX_HEAD_BYTES} bytes")
    return end


def _split_lines(head: bytes) -> list[bytes]:
    if not head.endswith(b"\r\n\r\n"):
        raise HttpError(400, "message head does not end with an empty line")
    lines = head[:-4].split(b"\r\n")
    for line in lines:
        if b"\r" in line or b"\n" in line:
            raise HttpError(400, "line endings must be CRLF")
    return lines


def _parse_field(line: bytes) -> tuple[str, str] | None:
    """``name: value`` → (name, value without surrounding whitespace); None if malformed."""
    name, colon, value = line.partition(b":")
    if not colon or not _FIELD_NAME.fullmatch(name) or _FORBIDDEN_IN_VALUE.search(value):
        return None
    return name.decode("ascii"), value.strip(b" \t").decode("latin-1")


def _parse_fields(lines: list[bytes]) -> Headers:
    fields: list[tuple[str, str]] = []
    for line in lines:
        if line[:1] in (b" ", b"\t"):
            raise HttpError(400, "obsolete line folding is not accepted")
        field = _parse_field(line)
        if field is None:
            shown = line[:60].decode("latin-1")
            raise HttpError(400, f"malformed header line {shown!r}")
        fields.append(field)
    return Headers(tuple(fields))


def _content_length(headers: Headers) -> int | None:
    values = headers.get_all("content-length")
    if not values:
        return None
    if any(not _DIGITS.fullmatch(value) for value in values) or len(set(values)) > 1:
        raise HttpError(400, f"invalid Content-Length {', '.join(values)!r}")
    return int(values[0])


def _request_framing(headers: Headers, version: HttpVersion) -> Framing:
    length = _content_length(headers)
    encodings = headers.get_all("transfer-encoding")
    if encodings:
        if length is not None:
            raise HttpError(400, "both Content-Length and Transfer-Encoding")
        if version == "HTTP/1.0":
            raise HttpError(400, "Transfer-Encoding in an HTTP/1.0 request")
        if len(encodings) > 1 or encodings[0].strip().lower() != "chunked":
            raise HttpError(400, f"unsupported Transfer-Encoding {', '.join(encodings)!r}")
        return Framing("chunked")
    if length:
        return Framing("length", length)
    return NO_BODY


def parse_request_head(head: bytes) -> RequestHead:
    """Parse a request head (through its final CRLFCRLF)."""
    lines = _split_lines(head)
    match = _REQUEST_LINE.fullmatch(lines[0])
    if match is None:
        shown = lines[0][:80].decode("latin-1")
        raise HttpError(400, f"malformed request line {shown!r}")
    version = match.group(3).decode("ascii")
    if version not in ("HTTP/1.0", "HTTP/1.1"):
        raise HttpError(505, f"unsupported HTTP version {version!r}")
    headers = _parse_fields(lines[1:])
    http_version: HttpVersion = "HTTP/1.0" if version == "HTTP/1.0" else "HTTP/1.1"
    return RequestHead(
        method=match.group(1).decode("ascii"),
        target=match.group(2).decode("latin-1"),
        version=http_version,
        headers=headers,
        framing=_request_framing(headers, http_version),
    )


def parse_response_head(head: bytes, request_method: str) -> ResponseHead:
    """Parse an upstream response head; the framing depends on the request's method.

    Any fault is the upstream's, so it is a 502 for the client, never a 4xx.
    """
    try:
        return _parse_response_head(head, request_method)
    except HttpError as error:
        raise HttpError(502, f"malformed response from upstream: {error.message}") from None


def _parse_response_head(head: bytes, request_method: str) -> ResponseHead:
    lines = _split_lines(head)
    match = _STATUS_LINE.fullmatch(lines[0])
    if match is None:
        shown = lines[0][:80].decode("latin-1")
        raise HttpError(502, f"malformed status line {shown!r}")
    version = match.group(1).decode("ascii")
    status = int(match.group(2))
    headers = _parse_fields(lines[1:])
    if request_method == "HEAD" or status < 200 or status in (204, 304):
        framing = NO_BODY
    elif encodings := headers.get_all("transfer-encoding"):
        last = encodings[-1].split(",")[-1].strip().lower()
        # RFC 9112 §6.1: chunked in an HTTP/1.0 response is faulty framing; read to close.
        chunked = last == "chunked" and version == "HTTP/1.1"
        framing = Framing("chunked") if chunked else Framing("close")
    else:
        length = _content_length(headers)
        framing = Framing("close") if length is None else Framing("length", length)
    return ResponseHead(
        version=version,
        status=status,
        reason=(match.group(3) or b"").decode("latin-1"),
        headers=headers,
        framing=framing,
    )


def _host_and_port_text(authority: str) -> tuple[str, str | None]:
    """Split ``host[:port]`` / ``[v6][:port]``; IPv6 must be bracketed, only IPv6 may be."""
    if authority.startswith("["):
        end = authority.find("]")
        if end < 0:
            raise HttpError(400, f"unbalanced brackets in {authority!r}")
        host, rest = authority[1:end], authority[end + 1 :]
        if host and ":" not in host:
            raise HttpError(400, f"only IPv6 addresses go in brackets: {authority!r}")
        if rest and not rest.startswith(":"):
            raise HttpError(400, f"invalid port in {authority!r}")
        return host, rest[1:] if rest else None
    host, sep, port_text = authority.rpartition(":")
    if not sep:
        return authority, None
    if ":" in host:
        raise HttpError(400, f"an IPv6 address must be in brackets: {authority!r}")
    return host, port_text


def _split_authority(authority: str, default_port: int | None) -> tuple[str, int]:
    """``host:port`` / ``[v6]:port`` → (host, port); host is not yet normalised."""
    if "@" in authority:
        raise HttpError(400, "credentials in the request target are not accepted")
    host, port_text = _host_and_port_text(authority)
    if not host:
        raise HttpError(400, f"no host in {authority!r}")
    if port_text is None:
        if default_port is None:
            raise HttpError(400, f"CONNECT target {authority!r} needs a port")
        return host, default_port
    if not _DIGITS.fullmatch(port_text) or len(port_text) > 5:
        raise HttpError(400, f"invalid port in {authority!r}")
    port = int(port_text)
    if not 1 <= port <= 65535:
        raise HttpError(400, f"port out of range in {authority!r}")
    return host, port


def parse_target(head: RequestHead) -> ProxyTarget:
    """Classify the request target; refuse the forms this proxy does not serve."""
    target = head.target
    if head.method == "CONNECT":
        host, port = _split_authority(target, None)
        return ProxyTarget("connect", host, port)
    if target.startswith("/"):
        return ProxyTarget("origin", path=target)
    return _absolute_target(target)


def _absolute_target(target: str) -> ProxyTarget:
    """``http://authority/path?query`` → a forward target with its origin-form path."""
    scheme, sep, rest = target.partition("://")
    if not sep:
        raise HttpError(400, f"unsupported request target {target[:80]!r}")
    if scheme.lower() == "https":
        raise HttpError(400, "https:// URLs must be requested with CONNECT")
    if scheme.lower() != "http":
        raise HttpError(400, f"unsupported URL scheme {scheme!r}")
    if "#" in rest:
        raise HttpError(400, "a fragment is not allowed in a request target")
    cut = min(
        (index for index in (rest.find("/"), rest.find("?")) if index >= 0), default=len(rest)
    )
    authority, path = rest[:cut], rest[cut:]
    if not path.startswith("/"):
        path = "/" + path
    host, port = _split_authority(authority, 80)
    return ProxyTarget("forward", host, port, path)


class BodyTracker:
    """Follows one body's framing over relayed bytes and says where it ends.

    ``feed(data)`` returns how many leading bytes of *data* belong to the body; once
    :attr:`done`, the rest is the next message. Nothing is copied: the caller relays
    ``data[:consumed]`` unchanged.
    """

    __slots__ = ("_line", "_remaining", "_state", "done", "kind")

    def __init__(self, framing: Framing) -> None:
        self.kind = framing.kind
        self._remaining = framing.length
        self._line = bytearray()
        # chunked states: "size", "data", "data-crlf", "trailer"
        self._state = "size"
        self.done = framing.kind == "none" or (framing.kind == "length" and framing.length == 0)

    def feed(self, data: bytes | bytearray) -> int:
        if self.done:
            return 0
        if self.kind == "close":
            return len(data)
        if self.kind == "length":
            taken = min(self._remaining, len(data))
            self._remaining -= taken
            self.done = self._remaining == 0
            return taken
        return self._feed_chunked(data)

    def _take_line(self, data: bytes | bytearray, position: int) -> tuple[int, bool]:
        """Append to the current line; (new position, whether the line is complete)."""
        end = data.find(b"\n", position)
        stop = len(data) if end < 0 else end + 1
        self._line += data[position:stop]
        if len(self._line) > MAX_CHUNK_LINE:
            raise HttpError(400, "chunk header line is too long")
        if end < 0:
            return stop, False
        if not self._line.endswith(b"\r\n"):
            raise HttpError(400, "chunk lines must end with CRLF")
        return stop, True

    def _feed_chunked(self, data: bytes | bytearray) -> int:
        position, size = 0, len(data)
        while position < size and not self.done:
            if self._state == "data":
                taken = min(self._remaining, size - position)
                position += taken
                self._remaining -= taken
                if self._remaining == 0:
                    self._state = "data-crlf"
                continue
            position, complete = self._take_line(data, position)
            if not complete:
                break
            line = bytes(self._line[:-2])
            self._line.clear()
            if self._state == "size":
                match = _CHUNK_SIZE.fullmatch(line)
                if match is None:
                    raise HttpError(400, f"malformed chunk size line {line[:40]!r}")
                self._remaining = int(match.group(1), 16)
                self._state = "data" if self._remaining else "trailer"
            elif self._state == "data-crlf":
                if line:
                    raise HttpError(400, "chunk data is longer than its size")
                self._state = "size"
            elif not line:  # trailer section ends with an empty line
                self.done = True
            elif _parse_field(line) is None:
                raise HttpError(400, "malformed trailer field")
        return position


def render_head(first_line: str, fields: Iterable[tuple[str, str]]) -> bytes:
    parts = [first_line]
    parts.extend(f"{name}: {value}" for name, value in fields)
    parts.append("\r\n")
    return "\r\n".join(parts).encode("latin-1")


def render_forward_request(head: RequestHead, target: ProxyTarget) -> bytes:
    """The request as sent upstream: origin-form, the URL's Host, no hop-by-hop fields."""
    host = target.authority.removesuffix(":80")
    fields = [("Host", host), *head.headers.without_hop_by_hop(also=("host",))]
    return render_head(f"{head.method} {target.path} HTTP/1.1", fields)


def render_forward_response(response: ResponseHead, *, close: bool) -> bytes:
    """The upstream response as sent to the client, hop-by-hop fields removed."""
    # A chunked message must not also carry Content-Length (RFC 9112 §6.3).
    also = ("content-length",) if response.framing.kind == "chunked" else ()
    fields = response.headers.without_hop_by_hop(also=also)
    if close:
        fields.append(("Connection", "close"))
    reason = response.reason or STATUS_PHRASES.get(response.status, "")
    return render_head(f"HTTP/1.1 {response.status} {reason}", fields)


def render_response(
    status: int,
    body: str = "",
    *,
    headers: Iterable[tuple[str, str]] = (),
    close: bool = True,
) -> bytes:
    """A complete small response generated by the proxy itself (plain-text body)."""
    payload = body.encode("utf-8")
    fields = [
        ("Content-Type", "text/plain; charset=utf-8"),
        ("Content-Length", str(len(payload))),
        *headers,
    ]
    if close:
        fields.append(("Connection", "close"))
    return render_head(f"HTTP/1.1 {status} {STATUS_PHRASES.get(status, '')}", fields) + payload


CONNECT_ESTABLISHED = b"HTTP/1.1 200 Connection established\r\n\r\n"
