"""Container health check for cloister-approval: ``GET /api/v1/health`` must answer 200.

Standard library only. Port from ``CLOISTER_APPROVAL_PORT`` (default 9999); the Host
header is the hub's first public host (``CLOISTER_APPROVAL_PUBLIC_HOSTS``, a JSON
list), since the hub refuses any other Host.
"""

from __future__ import annotations

import json
import os
import socket
import sys


def main() -> int:
    port = int(os.environ.get("CLOISTER_APPROVAL_PORT", "9999"))
    hosts = json.loads(os.environ.get("CLOISTER_APPROVAL_PUBLIC_HOSTS", '["127.0.0.1:9999"]'))
    request = f"GET /api/v1/health HTTP/1.1\r\nHost: {hosts[0]}\r\nConnection: close\r\n\r\n"
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=3) as sock:
            sock.sendall(request.encode())
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
