"""Container health check shared by the guardian's service images.

    healthcheck.py PATH PORT_VARIABLE DEFAULT_PORT [HOST_VARIABLE]

``GET PATH`` on 127.0.0.1 must answer 200. The port is the last ``:PORT`` of
``$PORT_VARIABLE`` (``0.0.0.0:3128`` or ``9999`` both work), else DEFAULT_PORT. The
``Host`` header is the first entry of ``$HOST_VARIABLE`` (a JSON list) when given — the
approval hub refuses any Host but its public ones — else ``localhost``. Standard
library only; exit status 0 is healthy.
"""

from __future__ import annotations

import json
import os
import socket
import sys


def main(argv: list[str]) -> int:
    path, port_variable, default_port = argv[:3]
    port = int(os.environ.get(port_variable, default_port).rpartition(":")[2])
    host = "localhost"
    if len(argv) > 3 and os.environ.get(argv[3]):
        host = json.loads(os.environ[argv[3]])[0]
    request = f"GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
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
    raise SystemExit(main(sys.argv[1:]))
