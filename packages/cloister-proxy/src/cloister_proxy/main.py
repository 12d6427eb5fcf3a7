"""``cloister-proxy``: build the settings, the state and the server, and run them.

    cloister-proxy --config-dir DIR --listen HOST:PORT [--approval-url URL]

Every option also comes from ``CLOISTER_PROXY_*`` variables (see ``--help``). SIGHUP
re-reads tokens and config at once; SIGTERM and SIGINT stop the server cleanly.
"""

from __future__ import annotations

import asyncio
import contextlib
import resource
import signal
import sys
from collections.abc import Sequence

import httpx

from cloister_core.audit import AuditLog
from cloister_proxy.approvals import HUB_LIMITS, HttpApprovalHub
from cloister_proxy.netinfo import OwnNetworks, own_addresses
from cloister_proxy.server import ProxyServer
from cloister_proxy.settings import ProxySettings
from cloister_proxy.state import ProxyState


def _report(message: str) -> None:
    print(f"cloister-proxy: {message}", file=sys.stderr, flush=True)


def _raise_file_limit() -> None:
    # Each tunnel holds two sockets and up to four pipe ends; the usual soft limit of
    # 1024 descriptors would cap the proxy at a few hundred tunnels.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


async def run(settings: ProxySettings) -> None:
    """Serve until SIGTERM or SIGINT (or until cancelled)."""
    loop = asyncio.get_running_loop()
    own = tuple(own_addresses())
    state = ProxyState(
        settings.paths,
        own_addresses=own,
        report=_report,
        guardian_networks=settings.guardian_networks,
        own_networks=OwnNetworks(own=own) if settings.refuse_own_networks else None,
    )
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(signum, stop.set)
    async with contextlib.AsyncExitStack() as stack:
        audit = stack.enter_context(
            AuditLog(
                settings.audit_log,
                stream=sys.stdout if settings.audit_stdout else None,
                cloister_dir=settings.cloister_logs,
                report=_report,
            )
        )
        hub = None
        if settings.approval_url:
            client = await stack.enter_async_context(httpx.AsyncClient(limits=HUB_LIMITS))
            hub = HttpApprovalHub(settings.approval_url, settings.credential(), client)
        server = ProxyServer(settings, state, audit, hub, _report)
        async with asyncio.TaskGroup() as tasks:
            serving = tasks.create_task(
                server.serve(
                    ready=lambda address: _report(f"listening on {address[0]}:{address[1]}")
                )
            )
            await stop.wait()
            serving.cancel()


def main(argv: Sequence[str] | None = None) -> int:
    settings = ProxySettings(_cli_parse_args=list(sys.argv[1:] if argv is None else argv))
    _raise_file_limit()
    # The standard event loop: measured faster than uvloop for this socket-level
    # design (benchmarks/bench_proxy.py), and one dependency fewer.
    asyncio.run(run(settings))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
