"""``cloister-executor``: ``serve`` (the host daemon) or ``gateway`` (the request server).

cloister-executor serve   [--config-dir DIR] [--data-dir DIR]
cloister-executor gateway [--port 9998] [--executor unix:/run/cloister/executor.sock]
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from cloister_executor import daemon, gateway

USAGE = """usage: cloister-executor {serve,gateway} [options]

  serve     the host daemon that runs approved commands (a Unix socket under <data>/run)
  gateway   the request server cloisters call (in the guardian stack, port 9998)

Run `cloister-executor serve --help` or `cloister-executor gateway --help` for options.
"""


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(USAGE, end="")
        return 0 if args else 2
    command, rest = args[0], args[1:]
    if command == "serve":
        return daemon.main(rest)
    if command == "gateway":
        return gateway.main(rest)
    print(f"cloister-executor: unknown command {command!r}\n\n{USAGE}", file=sys.stderr, end="")
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
