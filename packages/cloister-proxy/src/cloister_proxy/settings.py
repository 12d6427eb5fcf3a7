"""The proxy's settings: one object, built once in ``main()`` and passed down.

Every setting comes from a command-line option (``--config-dir``), else from a
``CLOISTER_PROXY_*`` environment variable (``CLOISTER_PROXY_CONFIG_DIR``), else its
default. Durations take seconds or ``10s``/``5m`` strings.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from pydantic import Field, SecretStr
from pydantic_settings import SettingsConfigDict

from cloister_core.config.models import Duration
from cloister_core.fileio import read_secret
from cloister_core.stack import PROXY_PORT
from cloister_proxy.service_settings import ServiceSettings


class ProxySettings(ServiceSettings):
    """Settings of ``cloister-proxy``."""

    model_config = SettingsConfigDict(env_prefix="CLOISTER_PROXY_", cli_prog_name="cloister-proxy")

    host_config_dir: Path | None = Field(
        default=None,
        description="the config directory as the human sees it (on the host, when this runs"
        " in a container that mounts it elsewhere), named in refusals (default: config_dir)",
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
    idle_timeout: Duration = Field(
        default=timedelta(minutes=5),
        description="a tunnel or keep-alive connection idle this long is closed",
    )
    max_connections: int = Field(
        default=4096, ge=1, description="connections at once (503 past it)"
    )
    max_connections_per_token: int = Field(
        default=512, ge=1, description="connections at once per cloister (429 past it)"
    )
    reload_interval: Duration = Field(
        default=timedelta(milliseconds=500),
        description="how often token and config files are checked for changes",
    )

    def credential(self) -> str | None:
        """The service credential, from the value or the file."""
        return read_secret(self.approval_credential, self.approval_credential_file)
