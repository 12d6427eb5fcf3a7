"""The gateway's side of the executor protocol: one request, one answer, per connection."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from pathlib import Path

from pydantic import TypeAdapter, ValidationError

from cloister_executor.protocol import ExecRefusal, ExecRequest, ExecResult

ANSWER_LIMIT = 8 * 1024 * 1024  # two capped outputs, base64 in JSON, with room to spare
_ANSWER: TypeAdapter[ExecResult | ExecRefusal] = TypeAdapter(ExecResult | ExecRefusal)


class ExecutorUnavailableError(Exception):
    """The executor could not be reached or answered nonsense."""


class ExecutorClient:
    """Talks to the executor at ``unix:PATH`` (Linux) or ``tcp:HOST:PORT`` (Docker Desktop)."""

    def __init__(self, address: str, secret_file: Path) -> None:
        kind, _, where = address.partition(":")
        if kind not in ("unix", "tcp") or not where:
            raise ValueError(
                f"executor address must be unix:PATH or tcp:HOST:PORT, not {address!r}"
            )
        self._where = where
        self._secret_file = secret_file
        self._tcp: tuple[str, int] | None = None
        if kind == "tcp":
            host, _, port = where.rpartition(":")
            if not host or not port.isdigit() or not 0 < int(port) <= 65535:
                raise ValueError(f"executor address must be tcp:HOST:PORT, not {address!r}")
            self._tcp = (host.strip("[]"), int(port))

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if self._tcp is None:
            return await asyncio.open_unix_connection(self._where, limit=ANSWER_LIMIT)
        return await asyncio.open_connection(*self._tcp, limit=ANSWER_LIMIT)

    async def run(
        self, token: str, argv: Sequence[str], timeout_seconds: float
    ) -> ExecResult | ExecRefusal:
        try:
            # Read at every call: the secret changes when the stack is set up again.
            secret = self._secret_file.read_text(encoding="ascii").strip()
        except (OSError, UnicodeDecodeError) as error:
            raise ExecutorUnavailableError(f"cannot read the executor secret: {error}") from None
        request = ExecRequest(
            secret=secret, token=token, argv=tuple(argv), timeout_seconds=timeout_seconds
        )
        try:
            reader, writer = await self._connect()
        except OSError as error:
            raise ExecutorUnavailableError(f"executor not reachable: {error}") from None
        try:
            writer.write(request.model_dump_json().encode() + b"\n")
            await writer.drain()
            line = await reader.readline()
        except (OSError, ValueError) as error:
            raise ExecutorUnavailableError(f"executor connection failed: {error}") from None
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()
        try:
            return _ANSWER.validate_json(line)
        except ValidationError:
            raise ExecutorUnavailableError(f"executor answered {line[:200]!r}") from None
