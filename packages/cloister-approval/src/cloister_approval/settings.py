"""The hub's settings: one object, built once in ``main()`` and passed to ``create_app``.

Options on the command line (``--port``, see :mod:`cloister_approval.main`), else
``CLOISTER_APPROVAL_*`` variables, else defaults. Validated here, once.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from pydantic import Field, FilePath, SecretStr, ValidationInfo, field_validator
from pydantic_settings import SettingsConfigDict

from cloister_core.config.models import Duration
from cloister_core.fileio import read_secret
from cloister_core.hubauth import sessions_dir
from cloister_core.settings import AuditSettings, Port
from cloister_core.stack import APPROVAL_PORT

# Not localhost: it may resolve to ::1, where another local user can listen on the port
# while the hub is published on 127.0.0.1 only, and be in an origin the human logged in to.
OWN_HOST = "127.0.0.1"


class ApprovalSettings(AuditSettings):
    """Settings of ``cloister-approval``."""

    model_config = SettingsConfigDict(env_prefix="CLOISTER_APPROVAL_")

    host: str = Field(default="127.0.0.1", description="address to listen on")
    port: Port = Field(default=APPROVAL_PORT, description="port to listen on")
    public_hosts: tuple[str, ...] = Field(
        default=(),
        validate_default=True,
        description="Host header values the UI answers to, besides 127.0.0.1:PORT"
        " (anything else is refused: DNS rebinding, and localhost, which may be another"
        " program on ::1); the Origins allowed to change state are http:// + these",
    )
    hub_secret: SecretStr | None = Field(
        default=None, description="the human's credential (prefer --hub-secret-file)"
    )
    hub_secret_file: FilePath | None = Field(
        default=None,
        description="file holding the hub secret, the human's credential (the CLI's"
        " <data>/guardian/hub.secret); without one a secret is made for this run and a"
        " one-time login URL printed",
    )
    service_credential: SecretStr | None = Field(
        default=None,
        description="credential the proxy and gateway present (prefer --service-credential-file)",
    )
    service_credential_file: FilePath | None = Field(
        default=None,
        description="file holding the service credential; without one the service API is off",
    )
    domain_timeout: Duration = Field(
        default=timedelta(seconds=60), description="how long a held domain waits for a human"
    )
    command_timeout: Duration = Field(
        default=timedelta(minutes=5), description="how long a held command waits for a human"
    )
    session_lifetime: Duration = Field(
        default=timedelta(days=30), description="how long a browser stays logged in"
    )
    hub_sessions_dir: Path | None = Field(
        default=None,
        description="directory whose revoked-before file `cloister guardian logout` writes"
        " (default: hub-sessions beside --hub-secret-file; none without that file)",
    )
    reload_interval: Duration = Field(
        default=timedelta(seconds=1),
        description="how often the token directory is checked for stopped cloisters",
    )
    max_pending: int = Field(
        default=1000, ge=1, description="held requests at most (service callers get 503 past it)"
    )
    recent_decisions: int = Field(
        default=500, ge=1, description="decisions kept for the UI and undo (the newest)"
    )

    @field_validator("public_hosts")
    @classmethod
    def _with_own_port(cls, value: tuple[str, ...], info: ValidationInfo) -> tuple[str, ...]:
        # The hub's own address always works: `--port 8999` alone is enough by hand.
        own = [f"{OWN_HOST}:{info.data['port']}"] if "port" in info.data else []
        hosts = [host.lower() for host in (*value, *own)]
        return tuple(dict.fromkeys(hosts))

    @property
    def allowed_origins(self) -> frozenset[str]:
        return frozenset(f"http://{host}" for host in self.public_hosts)

    @property
    def url(self) -> str:
        """Where a person opens the UI: the first public host."""
        return f"http://{self.public_hosts[0]}/"

    @property
    def sessions_dir(self) -> Path | None:
        """Where the browser sessions' revocation file is looked for, if anywhere."""
        if self.hub_sessions_dir is not None:
            return self.hub_sessions_dir
        return sessions_dir(self.hub_secret_file) if self.hub_secret_file is not None else None

    def credential(self) -> str | None:
        """The service credential, from the value or the file."""
        return read_secret(self.service_credential, self.service_credential_file)

    def secret(self) -> str | None:
        """The hub secret, from the value or the file; None when neither is set."""
        return read_secret(self.hub_secret, self.hub_secret_file)
