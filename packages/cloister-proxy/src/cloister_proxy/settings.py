"""The proxy's settings: one object, built once in ``main()`` and passed down.

Every setting comes from a command-line option (``--config-dir``), else from a
``CLOISTER_PROXY_*`` environment variable (``CLOISTER_PROXY_CONFIG_DIR``), else its
default. Durations take seconds or ``10s``/``5m`` strings.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from pydantic import Field, IPvAnyNetwork, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from cloister_core.config.models import Duration
from cloister_core.fileio import read_secret
from cloister_core.paths import CloisterPaths, default_config_dir, default_data_dir
from cloister_core.stack import PROXY_PORT


def parse_listen(value: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[v6]:PORT``; port 0 picks a free one) → (host, port)."""
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"listen address must be HOST:PORT, got {value!r}")
    host = host.removeprefix("[").removesuffix("]")
    return host or "0.0.0.0", int(port)  # noqa: S104 - an empty host means all interfaces


class ProxySettings(BaseSettings):
    """Settings of ``cloister-proxy``."""

    model_config = SettingsConfigDict(
        env_prefix="CLOISTER_PROXY_",
        extra="forbid",
        frozen=True,
        cli_kebab_case=True,
        cli_prog_name="cloister-proxy",
        cli_implicit_flags=True,
    )

    config_dir: Path = Field(
        default_factory=default_config_dir,
        description="Cloister's config directory: config.yaml, projects/, decisions/, tokens/"
        " (default: $CLOISTER_CONFIG_DIR or ~/.config/cloister)",
    )
    host_config_dir: Path | None = Field(
        default=None,
        description="the config directory as the human sees it (on the host, when this runs"
        " in a container that mounts it elsewhere), named in refusals (default: config_dir)",
    )
    data_dir: Path = Field(
        default_factory=default_data_dir,
        description="Cloister's data directory"
        " (default: $CLOISTER_DATA_DIR or ~/.local/share/cloister)",
    )
    listen: str = Field(default=f"0.0.0.0:{PROXY_PORT}", description="HOST:PORT to listen on")
    approval_url: str | None = Field(
        default=None,
        description="base URL of the approval hub; without it unlisted domains are refused",
    )
    approval_credential: SecretStr | None = Field(
        default=None, description="the hub's service credential (prefer the _file form)"
    )
    approval_credential_file: Path | None = Field(
        default=None, description="file holding the hub's service credential"
    )
    header_timeout: Duration = Field(
        default=timedelta(seconds=10), description="time allowed for a request head"
    )
    connect_timeout: Duration = Field(
        default=timedelta(seconds=10), description="time allowed to connect upstream"
    )
    idle_timeout: Duration = Field(
        default=timedelta(minutes=5),
        description="a tunnel or keep-alive connection idle this long is closed",
    )
    max_connections: int = Field(
        default=4096, ge=1, description="connections at once (503 past it)"
    )
    max_unauthenticated_per_address: int = Field(
        default=64,
        ge=1,
        description="connections one address may hold before a request authenticated"
        " (one cloister cannot take the whole max_connections)",
    )
    max_connections_per_token: int = Field(
        default=512, ge=1, description="connections at once per cloister (429 past it)"
    )
    reload_interval: Duration = Field(
        default=timedelta(milliseconds=500),
        description="how often token and config files are checked for changes",
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
        " loopback (read at each dial); off only where upstreams run beside the proxy"
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

    def credential(self) -> str | None:
        """The service credential, from the value or the file."""
        return read_secret(self.approval_credential, self.approval_credential_file)
