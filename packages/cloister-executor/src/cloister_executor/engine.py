"""The one thing the host daemon asks of the Docker engine: freeze a cloister.

When the git guard catches a cloister planting a link in its repository's git
directory, that agent is hostile; freezing it (``docker pause``: the cgroup freezer)
stops it from planting again, between the guard's sweep and the human's next git
command. The engine is reached over its Unix socket (``DOCKER_HOST=unix://...``, the
default); other transports are reported as unsupported rather than guessed at.
"""

from __future__ import annotations

import httpx

DEFAULT_DOCKER_HOST = "unix:///var/run/docker.sock"
TIMEOUT = 10.0


class Engine:
    """A minimal Docker engine client (``POST /containers/{name}/pause``)."""

    def __init__(self, docker_host: str | None) -> None:
        self._host = docker_host or DEFAULT_DOCKER_HOST

    @property
    def socket(self) -> str | None:
        return self._host.removeprefix("unix://") if self._host.startswith("unix://") else None

    async def pause(self, container: str) -> str | None:
        """Pause *container*; None when it is paused now, else what went wrong."""
        if self.socket is None:
            return f"cannot pause {container}: DOCKER_HOST={self._host!r} is not a Unix socket"
        transport = httpx.AsyncHTTPTransport(uds=self.socket)
        async with httpx.AsyncClient(transport=transport, timeout=TIMEOUT) as client:
            try:
                response = await client.post(f"http://docker/containers/{container}/pause")
            except httpx.HTTPError as error:
                return f"cannot pause {container}: {error}"
        if response.status_code == 204:
            return None
        if response.status_code == 409 and "already paused" in response.text:
            return None
        return f"cannot pause {container}: {response.status_code} {response.text.strip()}"
