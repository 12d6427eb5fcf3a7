"""The credential gateway's settings: one object, built once in ``main()``.

Every setting comes from a command-line option, else a ``CLOISTER_CREDENTIALS_*``
environment variable, else its default.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from pydantic import Field, IPvAnyNetwork, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from cloister_core.config.models import Duration
from cloister_core.paths import CloisterPaths, default_config_dir, default_data_dir
from cloister_core.stack import CREDENTIALS_PORT
from cloister_proxy.settings import parse_listen


class CredentialSettings(BaseSettings):
    """Settings of ``cloister-credentials``."""

    model_config = SettingsConfigDict(
        env_prefix="CLOISTER_CREDENTIALS_",
        extra="forbid",
        frozen=True,
        cli_kebab_case=True,
        cli_prog_name="cloister-credentials",
        cli_implicit_flags=True,
    )

    config_dir: Path = Field(
        default_factory=default_config_dir,
        description="Cloister's config directory: config.yaml and tokens/",
    )
    data_dir: Path = Field(
        default_factory=default_data_dir, description="Cloister's data directory"
    )
    secrets_dir: Path | None = Field(
        default=None,
        description="where the stored credentials are (default: <data>/credentials)",
    )
    listen: str = Field(default=f"0.0.0.0:{CREDENTIALS_PORT}", description="HOST:PORT to listen on")
    header_timeout: Duration = Field(
        default=timedelta(seconds=10), description="time allowed for a request head"
    )
    connect_timeout: Duration = Field(
        default=timedelta(seconds=10), description="time allowed to connect upstream"
    )
    idle_timeout: Duration = Field(
        default=timedelta(minutes=10),
        description="a connection idle this long is closed (a model may think for minutes)",
    )
    max_unauthenticated_per_address: int = Field(
        default=64,
        ge=1,
        description="connections one address may hold before a request was forwarded",
    )
    max_connections_per_cloister: int = Field(
        default=64,
        ge=1,
        description="connections one cloister may hold once a request was forwarded, for"
        " their whole life (each may hold an upstream connection on the shared key)",
    )
    body_timeout: Duration = Field(
        default=timedelta(seconds=60),
        description="time a client may take, in all, to send one request body",
    )
    guardian_networks: tuple[IPvAnyNetwork, ...] = Field(
        default=(),
        description="the guardian's own networks as a JSON list of CIDRs (the cloister"
        " network pool, the egress, control and ports subnets): never an upstream,"
        " whatever proxy.allow_private_networks says",
    )
    refuse_own_networks: bool = Field(
        default=True,
        description="never connect to the networks of this service's own interfaces or"
        " loopback (read at each dial); off only where upstreams run beside the gateway"
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

    @property
    def secrets(self) -> Path:
        return self.secrets_dir or self.data_dir / "credentials"
