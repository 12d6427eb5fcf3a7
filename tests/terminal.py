"""Answering a command's question on a real terminal (a pty), as a person would."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path


def answer_in_terminal(
    argv: Sequence[str],
    *,
    cwd: Path,
    env: Mapping[str, str],
    question: bytes,
    answer: str,
    timeout: float = 300,
) -> tuple[str, int]:
    """Run *argv* on a pty, wait for *question*, type *answer*: what it showed (all of
    it, with newlines), and its exit status."""
    main, child = pty.openpty()
    process = subprocess.Popen(
        list(argv), cwd=cwd, env=dict(env), stdin=child, stdout=child, stderr=child, close_fds=True
    )
    os.close(child)
    shown = b""
    deadline = time.monotonic() + timeout
    try:
        while question not in shown:
            assert time.monotonic() < deadline, shown.decode(errors="replace")
            ready, _, _ = select.select([main], [], [], 1)
            if ready:
                shown += os.read(main, 65536)
            assert process.poll() is None, shown.decode(errors="replace")
        os.write(main, f"{answer}\n".encode())
        while True:  # drain, so the child never blocks on a full terminal
            ready, _, _ = select.select([main], [], [], 1)
            if ready:
                try:
                    if not os.read(main, 65536):
                        break
                except OSError:  # EIO: the child closed its side
                    break
            elif process.poll() is not None:
                break
            assert time.monotonic() < deadline
        return shown.decode(errors="replace").replace("\r\n", "\n"), process.wait(60)
    finally:
        os.close(main)
        if process.poll() is None:
            process.kill()
            process.wait()
