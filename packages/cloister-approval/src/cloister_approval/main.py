"""``cloister-approval``: settings → ``create_app`` → uvicorn.

    cloister-approval [--host 127.0.0.1] [--port 9999] [--config-dir DIR]

Every option also comes from ``CLOISTER_APPROVAL_*`` variables (see ``--help``).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import uvicorn

from cloister_approval.app import create_app
from cloister_approval.settings import ApprovalSettings


def main(argv: Sequence[str] | None = None) -> int:
    settings = ApprovalSettings(_cli_parse_args=list(sys.argv[1:] if argv is None else argv))
    uvicorn.run(
        create_app(settings),
        host=settings.host,
        port=settings.port,
        log_level="warning",
        # Long polls and event streams stay open; let shutdown end them promptly.
        timeout_graceful_shutdown=2,
        proxy_headers=False,
        server_header=False,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
