"""Cloister tokens: the only identity a request from a cloister carries.

A token is 32 random bytes, hex-encoded. The CLI writes one JSON record per cloister
to ``<config>/tokens/<cloister>`` (mode 0600); the guardian services load that
directory read-only. The token value is a secret: records hide it from ``repr`` and
logs (:class:`pydantic.SecretStr`), and a listing never shows it.

A token is bound to its cloister's address on its own network (``address``, written by
the CLI once the container has one): the services refuse it from any other address, so
a cloister that learns another's token still cannot act as it. A record without an
address (the moment between the container's creation and its address) is refused.

A record names the agent the cloister was started with (``agent``, absent for a
shell): the proxy refuses that agent's own background hosts without asking
(:mod:`cloister_core.background`).

Lookup is constant-time with respect to the secret: the presented token is keyed
with HMAC-SHA256 under a random per-registry key and the digest is what the table is
indexed by, so the time a lookup takes tells an attacker nothing about how close a
guess was; the final comparison uses :func:`hmac.compare_digest`.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import json
import re
import secrets
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path

from pydantic import (
    AwareDatetime,
    BaseModel,
    ConfigDict,
    SecretStr,
    ValidationError,
    field_serializer,
    field_validator,
)

from cloister_core.errors import TokenError
from cloister_core.fileio import atomic_write
from cloister_core.names import validate_cloister_name, validate_name

TOKEN_BYTES = 32
_TOKEN_FORMAT = re.compile(r"[0-9a-f]{64}")


def generate_token() -> str:
    """A new token: 32 random bytes as 64 lower-case hex characters."""
    return secrets.token_hex(TOKEN_BYTES)


class TokenRecord(BaseModel):
    """The JSON record in ``tokens/<cloister>``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    token: SecretStr
    cloister: str
    project: str
    branch: str | None = None
    path: str
    created_at: AwareDatetime
    address: str | None = None  # the cloister's address on its own network
    agent: str | None = None  # `cloister start --agent NAME`; None: a shell

    @field_validator("token")
    @classmethod
    def _token_format(cls, value: SecretStr) -> SecretStr:
        if not _TOKEN_FORMAT.fullmatch(value.get_secret_value()):
            raise ValueError("token must be 64 lower-case hex characters")
        return value

    @field_validator("cloister")
    @classmethod
    def _cloister_name(cls, value: str) -> str:
        return validate_cloister_name(value)

    @field_validator("project")
    @classmethod
    def _project_name(cls, value: str) -> str:
        return validate_name(value, what="project name")

    @field_validator("path")
    @classmethod
    def _absolute_path(cls, value: str) -> str:
        if not Path(value).is_absolute():
            raise ValueError(f"path must be absolute, got {value!r}")
        return value

    @field_validator("address")
    @classmethod
    def _ip_address(cls, value: str | None) -> str | None:
        return str(ipaddress.ip_address(value)) if value is not None else None

    @field_validator("agent")
    @classmethod
    def _agent_name(cls, value: str | None) -> str | None:
        return validate_name(value, what="agent name") if value is not None else None

    def accepts_from(self, peer: str | None) -> bool:
        """Whether a request from *peer* may use this token: its cloister's address only."""
        if self.address is None or peer is None:
            return False
        try:
            address = ipaddress.ip_address(peer.split("%", 1)[0])
        except ValueError:
            return False
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped  # a dual-stack socket's view of an IPv4 peer
        return address == ipaddress.ip_address(self.address)

    def bound_to(self, address: str) -> TokenRecord:
        """This record, bound to *address*."""
        return self.model_copy(update={"address": str(ipaddress.ip_address(address))})

    def for_agent(self, agent: str | None) -> TokenRecord:
        """This record, for a cloister started with *agent* (None: a shell)."""
        return self.model_copy(update={"agent": self._agent_name(agent)})

    @field_serializer("token", when_used="json")
    def _reveal_token(self, value: SecretStr) -> str:
        # Only the token file's JSON holds the value; repr and model_dump() mask it.
        return value.get_secret_value()

    @property
    def secret(self) -> str:
        return self.token.get_secret_value()

    @classmethod
    def create(
        cls,
        *,
        cloister: str,
        project: str,
        path: Path,
        branch: str | None = None,
        address: str | None = None,
    ) -> TokenRecord:
        """A record with a fresh token, created now."""
        return cls(
            token=SecretStr(generate_token()),
            cloister=cloister,
            project=project,
            branch=branch,
            path=str(path),
            created_at=datetime.now(UTC),
            address=address,
        )


def token_path(tokens_dir: Path, cloister: str) -> Path:
    return tokens_dir / validate_cloister_name(cloister)


def write_token_file(tokens_dir: Path, record: TokenRecord) -> Path:
    """Write *record* atomically to ``<tokens_dir>/<cloister>`` with mode 0600."""
    path = token_path(tokens_dir, record.cloister)
    # Without an agent the record is written as before the field, for a proxy that
    # predates it (a running guardian is not restarted by an upgrade of the CLI).
    unset = {"agent"} if record.agent is None else None
    text = record.model_dump_json(indent=2, exclude=unset)
    atomic_write(path, text + "\n", mode=0o600, dir_mode=0o700)
    return path


def read_token_file(path: Path) -> TokenRecord:
    """Read one token record; :class:`TokenError` says which file and what is wrong."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return TokenRecord.model_validate(data)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise TokenError(f"{path}: cannot read token file: {error}") from None
    except ValidationError as error:
        details = "; ".join(
            f"{'.'.join(map(str, item['loc'])) or 'record'}: {item['msg']}"
            for item in error.errors()
        )
        raise TokenError(f"{path}: invalid token file: {details}") from None


def remove_token_file(tokens_dir: Path, cloister: str) -> bool:
    """Delete the token file of *cloister*; False if there was none."""
    try:
        token_path(tokens_dir, cloister).unlink()
    except FileNotFoundError:
        return False
    return True


def remove_tokens_bound_to(tokens_dir: Path, address: str, *, keep: str | None = None) -> list[str]:
    """Delete the token files bound to *address* (but cloister *keep*'s); the cloisters
    they named.

    A container that stopped without ``cloister stop`` (a reboot, ``docker rm``) leaves
    its token behind, and the engine gives its address to the next container: that
    token must not work from there. Unreadable files are left to the services' report.
    """
    address = str(ipaddress.ip_address(address))
    removed = []
    for path in sorted(tokens_dir.glob("[!.]*")):
        try:
            record = read_token_file(path)
        except TokenError:
            continue
        if record.cloister == keep:
            continue
        if record.address == address and remove_token_file(tokens_dir, record.cloister):
            removed.append(record.cloister)
    return removed


def _encode(token: str) -> bytes:
    # Whatever a client sent (even lone surrogates) must hash, not raise.
    return token.encode("utf-8", "surrogatepass")


class TokenRegistry:
    """In-memory token table with constant-time lookup."""

    __slots__ = ("_by_digest", "_key")

    def __init__(self, records: Iterable[TokenRecord] = ()) -> None:
        self._key = secrets.token_bytes(32)
        self._by_digest: dict[bytes, TokenRecord] = {}
        for record in records:
            self.add(record)

    def _digest(self, token: str) -> bytes:
        return hmac.new(self._key, _encode(token), hashlib.sha256).digest()

    @classmethod
    def load(cls, tokens_dir: Path) -> tuple[TokenRegistry, list[TokenError]]:
        """Every valid record in *tokens_dir*, plus the errors of the files that were not.

        Dot files (temporary files of an atomic write) are skipped.
        """
        registry = cls()
        errors: list[TokenError] = []
        try:
            entries = sorted(tokens_dir.iterdir())
        except FileNotFoundError:
            return registry, errors
        except OSError as error:  # unreadable: report it, serve with no tokens
            return registry, [TokenError(f"{tokens_dir}: cannot list token files: {error}")]
        for path in entries:
            if path.name.startswith(".") or not path.is_file():
                continue
            try:
                registry.add(read_token_file(path))
            except TokenError as error:
                errors.append(error)
        return registry, errors

    def add(self, record: TokenRecord) -> None:
        self._by_digest[self._digest(record.secret)] = record

    def lookup(self, token: str) -> TokenRecord | None:
        """The record for *token*, or None; timing does not depend on the secret."""
        record = self._by_digest.get(self._digest(token))
        if record is None or not hmac.compare_digest(record.secret.encode(), _encode(token)):
            return None
        return record

    def revoke(self, token: str) -> TokenRecord | None:
        """Forget *token*; returns its record if it was known."""
        record = self.lookup(token)
        if record is not None:
            del self._by_digest[self._digest(token)]
        return record

    def revoke_cloister(self, cloister: str) -> list[TokenRecord]:
        """Forget every token of *cloister*."""
        gone = [digest for digest, record in self._by_digest.items() if record.cloister == cloister]
        return [self._by_digest.pop(digest) for digest in gone]

    def __len__(self) -> int:
        return len(self._by_digest)

    def __contains__(self, token: object) -> bool:
        return isinstance(token, str) and self.lookup(token) is not None

    def __iter__(self) -> Iterator[TokenRecord]:
        return iter(list(self._by_digest.values()))
