"""The proxy's settings: one object, built once in ``main()`` and passed down.

Every setting comes from a command-line option (``--config-dir``), else from a
``CLOISTER_PROXY_*`` environment variable (``CLOISTER_PROXY_CONFIG_DIR``), else its
default. Durations take seconds or ``10s``/``5m`` strings.
"""

from __future__ import annotations

from datetime import timedelta

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from cloister_core.config.models import Duration
from cloister_core.settings import HubClientSettings
from cloister_core.stack import PROXY_PORT
from cloister_proxy.service_settings import ServiceSettings


class ProxySettings(ServiceSettings, HubClientSettings):
    """Settings of ``cloister-proxy``."""

    model_config = SettingsConfigDict(env_prefix="CLOISTER_PROXY_", cli_prog_name="cloister-proxy")

    listen: str = Field(default=f"0.0.0.0:{PROXY_PORT}", description="HOST:PORT to listen on")
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
