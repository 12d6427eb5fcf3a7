"""Printing for people (rich) and for scripts (JSON), and the image build display."""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator
from typing import Any

import click
from rich.console import Console
from rich.status import Status


def console(*, stderr: bool = False) -> Console:
    return Console(stderr=stderr, highlight=False)


def print_json(document: Any) -> None:
    click.echo(json.dumps(document, indent=2))


def warn(message: str) -> None:
    console(stderr=True).print(f"[bold yellow]warning:[/] {message}")


@contextlib.contextmanager
def build_progress() -> Iterator[Any]:
    """A callback ``(image, line)`` that shows image builds as they happen."""
    out = console(stderr=True)
    if not out.is_terminal:
        current: list[str] = [""]

        def plain(what: str, line: str) -> None:
            if what != current[0]:
                current[0] = what
                print(f"building {what}", file=sys.stderr, flush=True)
            if line.startswith("Step "):
                print(f"  {line}", file=sys.stderr, flush=True)

        yield plain
        return
    with Status("starting…", console=out) as status:

        def live(what: str, line: str) -> None:
            status.update(f"[bold]building {what}[/]  {line[:100]}")

        yield live
