"""The wire format between the hostexec gateway and the host executor.

One JSON object per line over the executor's Unix socket (or, on Docker Desktop only,
a loopback TCP port): the gateway sends an :class:`ExecRequest`, the executor answers
with an :class:`ExecResult` or an :class:`ExecRefusal`, then closes. The request
carries the cloister's token, never a directory: the executor finds the cloister's
host path in its own token files.
"""

from __future__ import annotations

import base64
from datetime import datetime
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, PlainSerializer

MAX_REQUEST_BYTES = 256 * 1024
OUTPUT_CAP = 1024 * 1024  # bytes of stdout and of stderr kept, each
MIN_SECRET_LENGTH = 32


def _from_wire(value: object) -> object:
    # On the wire (JSON) output is base64 text; in Python it is bytes.
    return base64.b64decode(value, validate=True) if isinstance(value, str) else value


def _to_wire(value: bytes) -> str:
    return base64.b64encode(value).decode("ascii")


WireBytes = Annotated[
    bytes,
    BeforeValidator(_from_wire),
    PlainSerializer(_to_wire, return_type=str, when_used="json"),
]


class _Message(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ExecRequest(_Message):
    secret: str = Field(repr=False)
    token: str = Field(repr=False)
    argv: tuple[str, ...] = Field(min_length=1)
    timeout_seconds: float = Field(gt=0)


class ExecResult(_Message):
    """What the command did. Output is bytes (base64 on the wire): binary-safe."""

    kind: Literal["result"] = "result"
    exit_code: int
    stdout: WireBytes
    stderr: WireBytes
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    timed_out: bool = False
    duration_ms: float

    @property
    def stdout_text(self) -> str:
        return self.stdout.decode("utf-8", "replace")

    @property
    def stderr_text(self) -> str:
        return self.stderr.decode("utf-8", "replace")


class ExecRefusal(_Message):
    kind: Literal["refusal"] = "refusal"
    reason: str


class ExecutorState(_Message):
    """``<data>/executor.json``: how to find the running daemon (no secret in it)."""

    pid: int
    socket: Path
    tcp: str | None = None
    secret_file: Path
    started_at: datetime
