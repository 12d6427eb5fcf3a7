"""Agent credentials: stored on the host, swapped in by the credential gateway.

The agent in a cloister never holds a real API key or OAuth token (for the
``api-key`` and ``oauth-token`` methods): its base URL is the credential gateway on
its own network, and the "key" it sends is its cloister token, which says who is calling.
The gateway puts the real credential in its place on the way to the vendor's API.

What is shared by the CLI (``cloister setup``, the cloister's environment) and the
gateway is here: each provider's path on the gateway, where its clients put their key,
and how the real one goes upstream; and the stored credential files,
``<data>/credentials/<agent>.json`` (0600, directory 0700): outside every directory
mounted into a cloister or the other guardian services; only the gateway's container
mounts it (read-only).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from pydantic import (
    AwareDatetime,
    BaseModel,
    ConfigDict,
    SecretStr,
    ValidationError,
    field_serializer,
)

from cloister_core.errors import CloisterError
from cloister_core.fileio import atomic_write
from cloister_core.paths import CloisterPaths

Method = Literal["existing-login", "oauth-token", "api-key"]
METHODS: tuple[Method, ...] = ("existing-login", "oauth-token", "api-key")
GATEWAY_METHODS: tuple[Method, ...] = ("oauth-token", "api-key")  # those the gateway swaps


class CredentialError(CloisterError):
    """A stored credential that is missing or cannot be read."""


@dataclass(frozen=True, slots=True)
class Provider:
    """How one agent's API calls cross the credential gateway."""

    agent: str  # "claude"
    prefix: str  # the gateway path the agent's base URL ends in: "/claude"
    default_api_base: str  # where the gateway forwards to unless agents.<name>.api_base
    token_headers: tuple[str, ...]  # request headers that may carry the client's key
    # upstream header per method: name and value template ({secret} replaced)
    upstream: Mapping[Method, tuple[tuple[str, str], ...]]

    def upstream_headers(self, method: Method, secret: str) -> list[tuple[str, str]]:
        """The headers that carry the real credential to the vendor."""
        return [(name, value.format(secret=secret)) for name, value in self.upstream[method]]


PROVIDERS: dict[str, Provider] = {
    "claude": Provider(
        agent="claude",
        prefix="/claude",
        default_api_base="https://api.anthropic.com",
        token_headers=("x-api-key", "authorization"),
        upstream={
            "api-key": (("x-api-key", "{secret}"),),
            "oauth-token": (("authorization", "Bearer {secret}"),),
        },
    ),
    "codex": Provider(
        agent="codex",
        prefix="/codex",
        default_api_base="https://api.openai.com",
        token_headers=("authorization",),
        upstream={
            "api-key": (("authorization", "Bearer {secret}"),),
            "oauth-token": (("authorization", "Bearer {secret}"),),
        },
    ),
    "gemini": Provider(
        agent="gemini",
        prefix="/gemini",
        default_api_base="https://generativelanguage.googleapis.com",
        token_headers=("x-goog-api-key", "authorization"),
        upstream={
            "api-key": (("x-goog-api-key", "{secret}"),),
            "oauth-token": (("authorization", "Bearer {secret}"),),
        },
    ),
}


def provider_of(path: str) -> tuple[Provider, str] | None:
    """The provider whose prefix *path* starts with, and the rest of the path."""
    for provider in PROVIDERS.values():
        if path == provider.prefix or path.startswith(provider.prefix + "/"):
            return provider, path[len(provider.prefix) :] or "/"
    return None


def client_token(provider: Provider, headers: Mapping[str, str]) -> str | None:
    """The cloister token a client sent (as its API key), from *headers* (lower-case names)."""
    for name in provider.token_headers:
        value = headers.get(name)
        if value:
            return value.removeprefix("Bearer ").strip() if name == "authorization" else value
    return None


class StoredCredential(BaseModel):
    """``<data>/credentials/<agent>.json``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    agent: str
    method: Method
    secret: SecretStr | None = None  # none for existing-login (the login files are copied)
    created_at: AwareDatetime

    @field_serializer("secret", when_used="json")
    def _reveal(self, value: SecretStr | None) -> str | None:
        # Only the credential file holds the value; repr and model_dump() mask it.
        return value.get_secret_value() if value is not None else None


def credentials_dir(paths: CloisterPaths) -> Path:
    return paths.data_dir / "credentials"


def credential_file(paths: CloisterPaths, agent: str) -> Path:
    if agent not in PROVIDERS:
        raise CredentialError(f"no such agent: {agent!r} (one of {', '.join(PROVIDERS)})")
    return credentials_dir(paths) / f"{agent}.json"


def store(paths: CloisterPaths, agent: str, method: Method, secret: str | None) -> Path:
    """Write the credential of *agent* (0600, directory 0700); the secret is never logged."""
    if method in GATEWAY_METHODS and not secret:
        raise CredentialError(f"the {method} method needs a secret")
    directory = credentials_dir(paths)
    if directory.resolve().is_relative_to(paths.config_dir.resolve()):
        # every guardian service mounts the config directory
        raise CredentialError(
            f"{directory} is inside the config directory {paths.config_dir}, which every"
            " guardian service can read: set CLOISTER_DATA_DIR elsewhere"
        )
    record = StoredCredential(
        agent=agent,
        method=method,
        secret=SecretStr(secret) if secret else None,
        created_at=datetime.now(UTC),
    )
    path = credential_file(paths, agent)
    atomic_write(path, record.model_dump_json(indent=2) + "\n", mode=0o600, dir_mode=0o700)
    path.parent.chmod(0o700)
    return path


def load(paths: CloisterPaths, agent: str) -> StoredCredential | None:
    return load_file(credential_file(paths, agent))


def load_file(path: Path) -> StoredCredential | None:
    """The credential in *path*; None when there is none; :class:`CredentialError` if broken."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as error:
        raise CredentialError(f"{path}: cannot read the credential: {error}") from None
    try:
        return StoredCredential.model_validate(data)
    except ValidationError as error:
        raise CredentialError(
            f"{path}: not a credential: {error.error_count()} problem(s)"
        ) from None


def remove(paths: CloisterPaths, agent: str) -> bool:
    try:
        credential_file(paths, agent).unlink()
    except FileNotFoundError:
        return False
    return True


def listing(paths: CloisterPaths) -> dict[str, Method | None]:
    """Every agent and its method (None when not set up); never the secrets."""
    found: dict[str, Method | None] = {}
    for agent in PROVIDERS:
        try:
            record = load(paths, agent)
        except CredentialError:
            record = None
        found[agent] = record.method if record else None
    return found
