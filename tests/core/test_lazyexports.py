"""A package's names imported from their modules when first used."""

from __future__ import annotations

import sys
import types
from collections.abc import Iterator

import pytest

from cloister_core.lazyexports import lazy_exports
from cloister_core.paths import CloisterPaths

PACKAGE = "cloister_core"  # a real package: its `paths` module defines CloisterPaths


@pytest.fixture
def package() -> Iterator[types.ModuleType]:
    """A stand-in package module under PACKAGE's name, restored after."""
    real = sys.modules[PACKAGE]
    stand_in = types.ModuleType(PACKAGE)
    stand_in.__path__ = list(real.__path__)
    sys.modules[PACKAGE] = stand_in
    try:
        yield stand_in
    finally:
        sys.modules[PACKAGE] = real


def test_a_name_comes_from_its_module_and_is_kept(package: types.ModuleType) -> None:
    hook = lazy_exports(PACKAGE, {"CloisterPaths": "paths"})
    assert hook("CloisterPaths") is CloisterPaths
    assert vars(package)["CloisterPaths"] is CloisterPaths  # later lookups skip the hook


def test_an_unknown_name_is_an_attribute_error(package: types.ModuleType) -> None:
    hook = lazy_exports(PACKAGE, {"CloisterPaths": "paths"})
    with pytest.raises(AttributeError, match=r"module 'cloister_core' has no attribute 'nope'"):
        hook("nope")
    assert "nope" not in vars(package)
