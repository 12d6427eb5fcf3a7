"""The credential gateway's settings: one object, built once in ``main()``.

Every setting comes from a command-line option, else a ``CLOISTER_CREDENTIALS_*``
environment variable, else its default.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from cloister_core.config.models import Duration
from cloister_core.stack import CREDENTIALS_PORT
from cloister_proxy.service_settings import ServiceSettings


class CredentialSettings(ServiceSettings):
    """Settings of ``cloister-credentials``."""

    model_config = SettingsConfigDict(
        env_prefix="CLOISTER_CREDENTIALS_", cli_prog_name="cloister-credentials"
    )

    secrets_dir: Path | None = Field(
        default=None,
        description="where the stored credentials are (default: <data>/credentials)",
    )
    listen: str = Field(default=f"0.0.0.0:{CREDENTIALS_PORT}", description="HOST:PORT to listen on")
    idle_timeout: Duration = Field(
        default=timedelta(minutes=10),
        description="a connection idle this long is closed (a model may think for minutes)",
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

    @property
    def secrets(self) -> Path:
        return self.secrets_dir or self.data_dir / "credentials"
