"""Printing for people (rich) and for scripts (JSON), and the image build display.

rich is imported only when something is drawn with it: ``cloister start`` with its
images present prints two plain lines, and its start-up time is a product figure.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import click

from cloister_core.printable import printable

if TYPE_CHECKING:
    from rich.console import Console
    from rich.status import Status


def console(*, stderr: bool = False) -> Console:
    """A rich console for stdout (or stderr) whose tables never cut an id, name or path
    (:mod:`cloister_cli.commands.tables`); piped, it folds no line at all."""
    from cloister_cli.commands.tables import (  # noqa: PLC0415 - lazy, see the module docstring
        UNFOLDED,
        WholeConsole,
    )

    out = WholeConsole(stderr=stderr, highlight=False)
    if not out.is_terminal:
        out.width = UNFOLDED
    return out


def print_json(document: Any) -> None:
    click.echo(json.dumps(document, indent=2))


def warn(message: str) -> None:
    click.echo(click.style("warning:", fg="yellow", bold=True) + f" {message}", err=True)


def note(message: str) -> None:
    """One line for the person, on stderr (stdout stays for what scripts read)."""
    click.echo(message, err=True)


@contextlib.contextmanager
def build_progress() -> Iterator[Callable[[str, str], None]]:
    """A callback ``(image, line)`` that shows image builds as they happen.

    On a terminal a rich status line (made on the first build line, so a start that
    builds nothing never loads rich); otherwise one line per image and build step.
    """
    if not sys.stderr.isatty():
        current = [""]

        def plain(what: str, line: str) -> None:
            if what != current[0]:
                current[0] = what
                print(f"building {printable(what)}", file=sys.stderr, flush=True)
            if line.startswith("Step "):
                print(f"  {printable(line)}", file=sys.stderr, flush=True)

        yield plain
        return
    with contextlib.ExitStack() as stack:
        shown: list[Status] = []

        def live(what: str, line: str) -> None:
            from rich.text import Text  # noqa: PLC0415 - lazy, see above

            if not shown:
                from rich.status import Status  # noqa: PLC0415 - lazy, see above

                shown.append(stack.enter_context(Status("", console=console(stderr=True))))
            # The builder's lines are the agent's (a RUN prints what it likes): plain
            # text, never rich markup, and their control characters escaped.
            shown[0].update(
                Text.assemble((f"building {printable(what)}", "bold"), "  ", printable(line[:100]))
            )

        yield live


def confirm_shape(difference: str) -> bool:
    """Show how the files a cloister's image is built from changed; ask to use them."""
    note("The files this cloister is built from changed since you last started it:")
    click.echo(difference, err=True, nl=False)
    return click.confirm("Start with them?", default=False, err=True)
