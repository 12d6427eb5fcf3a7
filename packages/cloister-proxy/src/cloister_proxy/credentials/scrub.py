"""The key never goes back the way it came, sans I/O.

Vendors echo what they were sent in some answers (an error naming the key it refused, a
debug field), and the gateway's whole point is that the agent never holds the key. So
every byte of an answer passes a :class:`Scrubber`: each occurrence of the secret sent
upstream becomes as many ``*`` (the same length, so a Content-Length or a chunk size
still holds), including one split across reads. Bytes that could be the start of the
secret are held back until the next read shows they are not (or the body ends), so a
stream is delayed only at such a tail, never by a whole buffer.
"""

from __future__ import annotations

# Shorter secrets would mask ordinary text; no vendor's key or token is this short.
MIN_SECRET_LENGTH = 16


class Scrubber:
    def __init__(self, secret: bytes) -> None:
        self._secret = secret if len(secret) >= MIN_SECRET_LENGTH else b""
        self._mask = b"*" * len(self._secret)
        self._held = b""

    def feed(self, data: bytes) -> bytes:
        """What of *data* (after what was held) may be sent now, scrubbed."""
        if not self._secret:
            return data
        text = (self._held + data).replace(self._secret, self._mask)
        keep = self._partial_tail(text)
        self._held = text[len(text) - keep :] if keep else b""
        return text[: len(text) - keep]

    def flush(self) -> bytes:
        """The end of the body: what was held back (it was not the secret)."""
        held, self._held = self._held, b""
        return held

    def scrub(self, data: bytes) -> bytes:
        """*data* on its own (a response head), scrubbed."""
        return data.replace(self._secret, self._mask) if self._secret else data

    def _partial_tail(self, text: bytes) -> int:
        """The length of the longest end of *text* that begins the secret."""
        first = self._secret[:1]
        start = max(0, len(text) - len(self._secret) + 1)
        at = text.find(first, start)
        while at >= 0:
            if self._secret.startswith(text[at:]):
                return len(text) - at
            at = text.find(first, at + 1)
        return 0
