"""Container health check for cloister-proxy: ``GET /healthz`` must answer 200.

Run by the image's HEALTHCHECK with the image's Python; standard library only. The
port comes from ``CLOISTER_PROXY_LISTEN`` (default 3128); exit status 0 is healthy.
"""

from __future__ import annotations

import os
import socket
import sys


def main() -> int:
    port = int(os.environ.get("CLOISTER_PROXY_LISTEN", "0.0.0.0:3128").rpartition(":")[2])
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=3) as sock:
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
            status_line = sock.recv(64).split(b"\r\n", 1)[0]
    except OSError as error:
        print(f"unhealthy: {error}", file=sys.stderr)
        return 1
    if not status_line.startswith(b"HTTP/1.1 200"):
        print(f"unhealthy: {status_line!r}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
