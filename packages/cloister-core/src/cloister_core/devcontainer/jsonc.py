"""devcontainer.json's JSONC (:mod:`cloister_core.jsonc`), its errors naming the file."""

from __future__ import annotations

from pathlib import Path

from cloister_core.devcontainer.model import DevcontainerError
from cloister_core.jsonc import JsoncError, Positions
from cloister_core.jsonc import parse_located as _parse_located


def parse_jsonc(text: str, path: Path) -> object:
    """Parse *text* (the content of *path*); errors name the file, line and column."""
    return parse_located(text, path)[0]


def parse_located(text: str, path: Path) -> tuple[object, Positions]:
    """Parse *text* as :func:`parse_jsonc` does; also where each of its values is."""
    try:
        return _parse_located(text)
    except JsoncError as error:
        raise DevcontainerError(path, error.message, error.line, error.column) from None
