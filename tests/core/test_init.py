"""The package's public names: all there, each imported only when first used."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys

import pytest

import cloister_core


@pytest.mark.parametrize("name", cloister_core.__all__)
def test_every_public_name_is_its_submodules_object(name: str) -> None:
    value = getattr(cloister_core, name)
    module = importlib.import_module(f"cloister_core.{cloister_core._EXPORTS[name]}")
    assert value is getattr(module, name)


def test_all_and_the_lazy_table_agree() -> None:
    assert sorted(cloister_core.__all__) == sorted(cloister_core._EXPORTS)
    assert set(cloister_core.__all__) <= set(dir(cloister_core))


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="module 'cloister_core' has no attribute 'nope'"):
        _ = cloister_core.nope  # type: ignore[attr-defined]


def test_from_import_star_gets_every_name() -> None:
    namespace: dict[str, object] = {}
    exec("from cloister_core import *", namespace)  # noqa: S102 - the statement under test
    assert set(cloister_core.__all__) <= set(namespace)


def loaded_after(code: str) -> set[str]:
    result = subprocess.run(
        [sys.executable, "-c", f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return set(json.loads(result.stdout))


def test_importing_the_package_or_a_light_submodule_loads_no_config() -> None:
    """The CLI imports errors, paths and names on every command: they stay cheap."""
    for code in ("import cloister_core", "from cloister_core.paths import CloisterPaths"):
        modules = loaded_after(code)
        assert "cloister_core.config" not in modules
        assert "pydantic" not in modules
        assert "ruamel.yaml" not in modules


def test_a_name_loads_its_own_submodule() -> None:
    modules = loaded_after("from cloister_core import CloisterPaths, GlobalConfig")
    assert {"cloister_core.paths", "cloister_core.config"} <= modules
    assert "cloister_core.decisions" not in modules
