"""The hub's settings: one object, built once in ``main()`` and passed to ``create_app``.

Options on the command line (``--listen``), else ``CLOISTER_APPROVAL_*`` variables,
else defaults.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from cloister_core.config.models import Duration
from cloister_core.fileio import read_secret
from cloister_core.paths import CloisterPaths, default_config_dir, default_data_dir


class ApprovalSettings(BaseSettings):
    """Settings of ``cloister-approval``."""

    model_config = SettingsConfigDict(
        env_prefix="CLOISTER_APPROVAL_",
        extra="forbid",
        frozen=True,
        cli_kebab_case=True,
        cli_prog_name="cloister-approval",
        cli_implicit_flags=True,
    )

    config_dir: Path = Field(
        default_factory=default_config_dir,
        description="Cloister's config directory (decisions are written below it)",
    )
    data_dir: Path = Field(
        default_factory=default_data_dir, description="Cloister's data directory"
    )
    host: str = Field(default="127.0.0.1", description="address to listen on")
    port: int = Field(default=9999, ge=0, le=65535, description="port to listen on")
    public_hosts: tuple[str, ...] = Field(
        default=("127.0.0.1:9999", "localhost:9999"),
        description="Host header values the UI answers to (anything else is refused:"
        " DNS rebinding); the Origins allowed to change state are http:// + these",
    )
    service_credential: SecretStr | None = Field(
        default=None, description="credential the proxy and gateway present (prefer _file)"
    )
    service_credential_file: Path | None = Field(
        default=None, description="file holding the service credential"
    )
    domain_timeout: Duration = Field(
        default=timedelta(seconds=60), description="how long a held domain waits for a human"
    )
    command_timeout: Duration = Field(
        default=timedelta(minutes=5), description="how long a held command waits for a human"
    )
    max_pending: int = Field(
        default=1000, ge=1, description="held requests at most (service callers get 503 past it)"
    )
    recent_decisions: int = Field(
        default=200, ge=1, description="decisions kept for the UI and undo"
    )
    audit_log: Path | None = Field(default=None, description="append audit JSON lines to this file")
    audit_stdout: bool = Field(default=False, description="also write audit lines to stdout")

    @field_validator("public_hosts")
    @classmethod
    def _lower(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(host.lower() for host in value)

    @property
    def paths(self) -> CloisterPaths:
        return CloisterPaths(config_dir=self.config_dir, data_dir=self.data_dir)

    @property
    def allowed_origins(self) -> frozenset[str]:
        return frozenset(f"http://{host}" for host in self.public_hosts)

    def credential(self) -> str | None:
        """The service credential, from the value or the file."""
        return read_secret(self.service_credential, self.service_credential_file)
