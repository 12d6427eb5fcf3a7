"""A package whose names are imported from their modules when first used (PEP 562).

A package ``__init__`` that re-exported its modules' names eagerly would import them all
for a command that needs one (``cloister start`` in a project without a devcontainer,
``cloister images list``). Such a package maps each public name to its module and sets
``__getattr__ = lazy_exports(__name__, homes)``; mypy still sees the names through
imports under ``TYPE_CHECKING``.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping


def lazy_exports(package: str, homes: Mapping[str, str]) -> Callable[[str], object]:
    """The module ``__getattr__`` of *package*: each name of *homes* (name → the module
    under *package* that defines it) imported when first asked, then kept in the
    package's namespace (later lookups do not come here)."""

    def __getattr__(name: str) -> object:  # noqa: N807 - the module hook's own name
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{home}"), name)
        setattr(sys.modules[package], name, value)
        return value

    return __getattr__
