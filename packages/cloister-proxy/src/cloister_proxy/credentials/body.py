"""A request body as the credential gateway sends it upstream, sans I/O: bytes in, bytes out.

A ``Content-Length`` body goes on as it comes. A chunked one is re-chunked as it
streams: the data that one read brings becomes one chunk, and the client's chunk
extensions and trailer fields (parsed as strictly as the head, then dropped) never
reach the vendor, so nothing of the client's framing but its data does: a trailer
cannot add a header the head's allowlist dropped, and an extension cannot be read
differently by a server behind the vendor's edge.
"""

from __future__ import annotations

import re

from cloister_proxy.http1 import MAX_CHUNK_LINE, MAX_HEAD_BYTES, Framing, HttpError

# What the proxy's parser accepts too (http1): hex size, optional space, ";" extensions.
_CHUNK_SIZE = re.compile(rb"([0-9A-Fa-f]{1,15})[ \t]*(?:;[^\x00-\x08\x0a-\x1f\x7f]*)?")
_TRAILER_FIELD = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+:[^\x00-\x08\x0a-\x1f\x7f]*")
LAST_CHUNK = b"0\r\n\r\n"


def frame_chunk(payload: bytes) -> bytes:
    """*payload* as one chunk; nothing for none (a zero size is the end of the body)."""
    return f"{len(payload):x}\r\n".encode("ascii") + payload + b"\r\n" if payload else b""


class UpstreamBody:
    """Follows one request body and says what to send upstream for each piece read.

    ``feed(data)`` returns how many leading bytes of *data* belong to the body and the
    bytes to send for them; once :attr:`done`, the rest of *data* is the next request.
    """

    __slots__ = ("_line", "_remaining", "_state", "_trailer_bytes", "done", "kind")

    def __init__(self, framing: Framing) -> None:
        if framing.kind == "close":
            raise ValueError("a request body is never delimited by the connection's close")
        self.kind = framing.kind
        self._remaining = framing.length
        self._line = bytearray()
        self._state = "size"  # chunked: "size", "data", "data-crlf", "trailer"
        self._trailer_bytes = 0
        self.done = framing.kind == "none" or (framing.kind == "length" and framing.length == 0)

    def feed(self, data: bytes) -> tuple[int, bytes]:
        if self.done:
            return 0, b""
        taken, payload = self.feed_payload(data)
        if self.kind != "chunked":
            return taken, payload
        return taken, frame_chunk(payload) + (LAST_CHUNK if self.done else b"")

    def feed_payload(self, data: bytes) -> tuple[int, bytes]:
        """Like :meth:`feed`, but the body's data alone (a chunked one decoded)."""
        if self.done:
            return 0, b""
        if self.kind == "length":
            taken = min(self._remaining, len(data))
            self._remaining -= taken
            self.done = self._remaining == 0
            return taken, data[:taken]
        return self._feed_chunked(data)

    def _feed_chunked(self, data: bytes) -> tuple[int, bytes]:
        position, size = 0, len(data)
        pieces: list[bytes] = []
        while position < size and not self.done:
            if self._state == "data":
                taken = min(self._remaining, size - position)
                pieces.append(data[position : position + taken])
                position += taken
                self._remaining -= taken
                if self._remaining == 0:
                    self._state = "data-crlf"
                continue
            position, line = self._take_line(data, position)
            if line is None:
                break
            self._line_done(line)
        return position, b"".join(pieces)

    def _take_line(self, data: bytes, position: int) -> tuple[int, bytes | None]:
        """Add to the current line; (new position, the line without CRLF once complete)."""
        end = data.find(b"\n", position)
        stop = len(data) if end < 0 else end + 1
        self._line += data[position:stop]
        if len(self._line) > MAX_CHUNK_LINE:
            raise HttpError(400, "chunk header line is too long")
        if end < 0:
            return stop, None
        if not self._line.endswith(b"\r\n"):
            raise HttpError(400, "chunk lines must end with CRLF")
        line = bytes(self._line[:-2])
        self._line.clear()
        return stop, line

    def _line_done(self, line: bytes) -> None:
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
        elif not line:  # the trailer section ends with an empty line
            self.done = True
        elif not _TRAILER_FIELD.fullmatch(line):
            raise HttpError(400, f"malformed trailer field {line[:40]!r}")
        else:
            self._trailer_bytes += len(line) + 2
            if self._trailer_bytes > MAX_HEAD_BYTES:
                raise HttpError(431, f"trailer section is larger than {MAX_HEAD_BYTES} bytes")
