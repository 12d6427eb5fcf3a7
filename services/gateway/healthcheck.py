"""Container health check for the hostexec gateway: ``GET /healthz`` must answer 200.

Standard library only; port from ``CLOISTER_GATEWAY_PORT`` (default 9998).
"""

from __future__ import annotations

import os
import socket
import sys


def main() -> int:
    port = int(os.environ.get("CLOISTER_GATEWAY_PORT", "9998"))
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=3) as sock:
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: gateway\r\nConnection: close\r\n\r\n")
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
