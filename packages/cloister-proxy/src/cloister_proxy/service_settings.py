"""What the proxy's and the credential gateway's settings share.

Both are built once in their ``main()`` from command-line options, else environment
variables under their own prefix, else defaults; both listen, dial upstreams behind the
same address guard and write the same audit lines.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from pydantic import Field, IPvAnyNetwork, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from cloister_core.config.models import Duration
from cloister_core.paths import CloisterPaths, default_config_dir, default_data_dir


def parse_listen(value: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[v6]:PORT``; port 0 picks a free one) → (host, port)."""
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"listen address must be HOST:PORT, got {value!r}")
    host = host.removeprefix("[").removesuffix("]")
    return host or "0.0.0.0", int(port)  # noqa: S104 - an empty host means all interfaces


class ServiceSettings(BaseSettings):
    """The fields both services have; each sets its prefix, name and port."""

    model_config = SettingsConfigDict(
        extra="forbid",
        frozen=True,
        cli_kebab_case=True,
        cli_implicit_flags=True,
    )

    config_dir: Path = Field(
        default_factory=default_config_dir,
        description="Cloister's config directory: config.yaml, projects/, decisions/,"
        " tokens/ (default: $CLOISTER_CONFIG_DIR or ~/.config/cloister)",
    )
    data_dir: Path = Field(
        default_factory=default_data_dir,
        description="Cloister's data directory"
        " (default: $CLOISTER_DATA_DIR or ~/.local/share/cloister)",
    )
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
    audit_log: Path | None = Field(default=None, description="append audit JSON lines to this file")
    cloister_logs: Path | None = Field(
        default=None,
        description="also append each cloister's audit lines to <cloister>.log in this directory",
    )
    audit_stdout: bool = Field(default=False, description="also write audit lines to stdout")

    @field_validator("listen")
    @classmethod
    def _host_and_port(cls, value: str) -> str:
        parse_listen(value)
        return value

    @property
    def listen_address(self) -> tuple[str, int]:
        return parse_listen(self.listen)

    @property
    def paths(self) -> CloisterPaths:
        return CloisterPaths(config_dir=self.config_dir, data_dir=self.data_dir)
