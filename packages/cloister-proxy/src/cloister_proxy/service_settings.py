"""What the proxy's and the credential gateway's settings share besides
:class:`cloister_core.settings.AuditSettings`: both listen on ``HOST:PORT`` and dial
upstreams behind the same address guard.
"""

from __future__ import annotations

from datetime import timedelta

from pydantic import Field, IPvAnyNetwork, field_validator

from cloister_core.config.models import Duration
from cloister_core.settings import AuditSettings


def parse_listen(value: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[v6]:PORT``; port 0 picks a free one) → (host, port)."""
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"listen address must be HOST:PORT, got {value!r}")
    host = host.removeprefix("[").removesuffix("]")
    return host or "0.0.0.0", int(port)  # noqa: S104 - an empty host means all interfaces


class ServiceSettings(AuditSettings):
    """The fields both services have; each sets its prefix, name and port."""

    listen: str = Field(description="HOST:PORT to listen on")
    header_timeout: Duration = Field(
        default=timedelta(seconds=10), description="time allowed for a request head"
    )
    connect_timeout: Duration = Field(
        default=timedelta(seconds=10), description="time allowed to connect upstream"
    )
    max_unauthenticated_per_address: int = Field(
        default=64,
        ge=1,
        description="connections one address may hold before a request on them was let"
        " through (authenticated by the proxy, forwarded by the gateway): one cloister"
        " cannot take them all",
    )
    guardian_networks: tuple[IPvAnyNetwork, ...] = Field(
        default=(),
        description="the guardian's own networks as a JSON list of CIDRs (the cloister"
        " network pool, the egress, control and ports subnets): never a destination,"
        " whatever proxy.allow_private_networks says",
    )
    refuse_own_networks: bool = Field(
        default=True,
        description="never connect to the networks of this service's own interfaces or"
        " loopback (read at each dial); off only where upstreams run beside the service"
        " (tests, benchmarks)",
    )

    @field_validator("listen")
    @classmethod
    def _host_and_port(cls, value: str) -> str:
        parse_listen(value)
        return value

    @property
    def listen_address(self) -> tuple[str, int]:
        return parse_listen(self.listen)
