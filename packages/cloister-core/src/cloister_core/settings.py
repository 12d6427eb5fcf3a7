"""What the services' settings share: one field, one meaning, one validation.

Each service builds one settings object in its ``main()``: from command-line options,
else environment variables under its own prefix (``CLOISTER_PROXY_``,
``CLOISTER_GATEWAY_``, ...), else defaults. Its class derives from the ones here:

:class:`CloisterSettings`   every service: where Cloister's files are
:class:`AuditSettings`      the services that write audit lines (all but the executor)
:class:`HubClientSettings`  the services that hold requests at the approval hub (the
                            proxy and the hostexec gateway)

A subclass sets its ``env_prefix`` and ``cli_prog_name``; the rest of the
configuration (unknown fields refused, frozen, ``--kebab-case`` options) is set here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from cloister_core.fileio import read_secret
from cloister_core.paths import CloisterPaths, default_config_dir, default_data_dir

Port = Annotated[int, Field(ge=0, le=65535)]  # 0 picks a free one


class CloisterSettings(BaseSettings):
    """Cloister's two directories, as every service reads them."""

    model_config = SettingsConfigDict(
        extra="forbid",
        frozen=True,
        cli_kebab_case=True,
        cli_implicit_flags=True,
    )

    config_dir: Path = Field(
        default_factory=default_config_dir,
        description="Cloister's config directory: config.yaml, projects/, decisions/,"
        " tokens/ (default: $CLOISTER_CONFIG_DIR, else ~/.config/cloister)",
    )
    data_dir: Path = Field(
        default_factory=default_data_dir,
        description="Cloister's data directory"
        " (default: $CLOISTER_DATA_DIR, else ~/.local/share/cloister)",
    )

    @property
    def paths(self) -> CloisterPaths:
        return CloisterPaths(config_dir=self.config_dir, data_dir=self.data_dir)


class AuditSettings(CloisterSettings):
    """Where a service writes its audit lines (:class:`cloister_core.audit.AuditLog`)."""

    audit_log: Path | None = Field(default=None, description="append audit JSON lines to this file")
    cloister_logs: Path | None = Field(
        default=None,
        description="also append each cloister's audit lines to <cloister>.log in this directory",
    )
    audit_stdout: bool = Field(default=False, description="also write audit lines to stdout")


class HubClientSettings(CloisterSettings):
    """How a service reaches the approval hub, and names the config in its refusals."""

    host_config_dir: Path | None = Field(
        default=None,
        description="the config directory as the human sees it (on the host, when this runs"
        " in a container that mounts it elsewhere), named in refusals (default: config_dir)",
    )
    approval_url: str | None = Field(
        default=None,
        description="base URL of the approval hub; without it nothing waits for a human:"
        " what would is refused",
    )
    approval_credential: SecretStr | None = Field(
        default=None, description="the hub's service credential (prefer the _file form)"
    )
    approval_credential_file: Path | None = Field(
        default=None, description="file holding the hub's service credential"
    )

    def credential(self) -> str | None:
        """The service credential, from the value or the file."""
        return read_secret(self.approval_credential, self.approval_credential_file)
