"""The fake internet's one server: what an agent's requests reach once the proxy lets them.

Standard library only: the e2e harness runs this file in the ``cloister-fakeapi`` image
(Debian's python3), on the host's network, bound to one host address that is on none of
the guardian's networks (see ``harness.FakeInternet``). Every name of the fake internet
(``allowed.example.test``, ``denied.example.test``, …) resolves to that address, so
one server answers them all, by their Host header:

* port 80, plain HTTP, and port 443, TLS with a certificate of the test CA for
  ``example.test`` and ``*.example.test`` (and ``*.wild.example.test``);
* ``GET /ws`` on either: a WebSocket that echoes every text frame back;
* any other request: ``200`` with a JSON body naming the host, method and path;
* port 8080: the fake model APIs of ``tests/agents/fakeapi.py`` (Anthropic, OpenAI,
  Gemini), for the credential gateway.

Every request is one JSON line in ``upstream.jsonl`` of the log directory (host, method,
path, every header): a test reads it to prove what did or did not arrive.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import importlib
import json
import ssl
import struct
import sys
import threading
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

WEBSOCKET_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
READY = "upstream ready"
FAKEAPI_DIR = "/opt/fakeapi"  # where the cloister-fakeapi image keeps fakeapi.py


class Log:
    """One JSON object per request, appended under a lock (servers run in threads)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.lock = threading.Lock()

    def write(self, entry: dict[str, Any]) -> None:
        line = json.dumps(entry, sort_keys=True) + "\n"
        with self.lock, self.path.open("a", encoding="utf-8") as stream:
            stream.write(line)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    log: ClassVar[Log]
    scheme: ClassVar[str]

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the JSON log says what arrived."""

    def record(self) -> None:
        self.log.write(
            {
                "scheme": self.scheme,
                "method": self.command,
                "host": self.headers.get("Host", ""),
                "path": self.path,
                "headers": [[key, value] for key, value in self.headers.items()],
            }
        )

    def answer(self) -> None:
        self.record()
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(min(length, 1 << 20))
        if self.path.startswith("/ws") and self.headers.get("Upgrade", "").lower() == "websocket":
            self.websocket()
            return
        body = json.dumps(
            {
                "upstream": "fake-internet",
                "scheme": self.scheme,
                "host": self.headers.get("Host", ""),
                "method": self.command,
                "path": self.path,
            }
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = do_PATCH = do_OPTIONS = answer  # noqa: N815

    def websocket(self) -> None:
        key = self.headers.get("Sec-WebSocket-Key", "")
        accept = base64.b64encode(
            hashlib.sha1((key + WEBSOCKET_GUID).encode(), usedforsecurity=False).digest()
        )
        self.send_response(101)
        self.send_header("Upgrade", "websocket")
        self.send_header("Connection", "Upgrade")
        self.send_header("Sec-WebSocket-Accept", accept.decode())
        self.end_headers()
        self.wfile.flush()
        while True:
            frame = read_frame(self.rfile)
            if frame is None:
                break
            opcode, payload = frame
            if opcode == 0x8:  # close
                self.wfile.write(b"\x88\x00")
                break
            if opcode in (0x1, 0x2):
                self.wfile.write(encode_frame(opcode, b"echo: " + payload))
                self.wfile.flush()
        self.close_connection = True


def read_frame(stream: Any) -> tuple[int, bytes] | None:
    """One client frame (masked, as a client must), or None at the end of the stream."""
    head = stream.read(2)
    if len(head) < 2:
        return None
    opcode = head[0] & 0x0F
    length = head[1] & 0x7F
    if length == 126:
        (length,) = struct.unpack("!H", stream.read(2))
    elif length == 127:
        (length,) = struct.unpack("!Q", stream.read(8))
    mask = stream.read(4) if head[1] & 0x80 else b"\x00\x00\x00\x00"
    payload = bytearray(stream.read(length))
    for index in range(len(payload)):
        payload[index] ^= mask[index % 4]
    return opcode, bytes(payload)


def encode_frame(opcode: int, payload: bytes) -> bytes:
    """A server frame (unmasked) of *payload*."""
    if len(payload) < 126:
        head = struct.pack("!BB", 0x80 | opcode, len(payload))
    else:
        head = struct.pack("!BBH", 0x80 | opcode, 126, len(payload))
    return head + payload


def handler(log: Log, scheme: str) -> type[Handler]:
    return type(f"{scheme.title()}Handler", (Handler,), {"log": log, "scheme": scheme})


def serve(server: ThreadingHTTPServer) -> threading.Thread:
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    return thread


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="The e2e suite's fake internet.")
    parser.add_argument("--address", required=True, help="the host address to listen on")
    parser.add_argument("--certs", type=Path, required=True, help="leaf.pem and leaf.key")
    parser.add_argument("--log", type=Path, required=True, help="a directory for the logs")
    parser.add_argument("--http-port", type=int, default=80)
    parser.add_argument("--https-port", type=int, default=443)
    parser.add_argument("--api-port", type=int, default=8080)
    options = parser.parse_args(argv)
    log = Log(options.log / "upstream.jsonl")

    plain = ThreadingHTTPServer((options.address, options.http_port), handler(log, "http"))
    secure = ThreadingHTTPServer((options.address, options.https_port), handler(log, "https"))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(options.certs / "leaf.pem", options.certs / "leaf.key")
    # The handshake happens in the handler's thread: a silent client holds only its own.
    secure.socket = context.wrap_socket(
        secure.socket, server_side=True, do_handshake_on_connect=False
    )

    sys.path.insert(0, FAKEAPI_DIR)
    fakeapi = importlib.import_module("fakeapi")  # the image's copy, found at run time
    requests = fakeapi.RequestLog(options.log / "api.jsonl")
    api = fakeapi.FakeApiServer(
        (options.address, options.api_port),
        fakeapi.FakeApi(requests, fakeapi.DEFAULT_BASH_COMMAND),
    )
    threads = [serve(plain), serve(secure), serve(api)]
    print(READY, flush=True)
    for thread in threads:
        thread.join()
    return 0


if __name__ == "__main__":
    sys.exit(main())
