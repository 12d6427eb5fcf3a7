"""``cloister-credentials``: the credential gateway (a guardian service on each cloister's network).

    cloister-credentials --config-dir DIR --secrets-dir DIR [--listen 0.0.0.0:9997]

SIGTERM and SIGINT stop it cleanly.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
from collections.abc import Sequence

from cloister_core.audit import AuditLog
from cloister_proxy.credentials.server import CredentialGateway
from cloister_proxy.credentials.settings import CredentialSettings
from cloister_proxy.credentials.state import CredentialState
from cloister_proxy.netinfo import OwnNetworks, own_addresses


def _report(message: str) -> None:
    print(f"cloister-credentials: {message}", file=sys.stderr, flush=True)


async def run(settings: CredentialSettings) -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(signum, stop.set)
    own = tuple(own_addresses())
    state = CredentialState(
        settings.paths,
        settings.secrets,
        own,
        _report,
        guardian_networks=settings.guardian_networks,
        own_networks=OwnNetworks(own=own) if settings.refuse_own_networks else None,
    )
    with AuditLog(
        settings.audit_log,
        stream=sys.stdout if settings.audit_stdout else None,
        cloister_dir=settings.cloister_logs,
        report=_report,
    ) as audit:
        gateway = CredentialGateway(settings, state, audit, _report)
        async with asyncio.TaskGroup() as tasks:
            serving = tasks.create_task(
                gateway.serve(
                    ready=lambda address: _report(f"listening on {address[0]}:{address[1]}")
                )
            )
            await stop.wait()
            serving.cancel()


def main(argv: Sequence[str] | None = None) -> int:
    settings = CredentialSettings(_cli_parse_args=list(sys.argv[1:] if argv is None else argv))
    asyncio.run(run(settings))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
