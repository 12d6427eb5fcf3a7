"""The package itself: a map of its submodules, which are what the code imports."""

from __future__ import annotations

import ast
import json
import pkgutil
import subprocess
import sys
from pathlib import Path

import cloister_core

ROOT = Path(__file__).resolve().parents[2]
SUBMODULES = {module.name for module in pkgutil.iter_modules(cloister_core.__path__)}


def test_the_map_names_every_submodule() -> None:
    doc = cloister_core.__doc__ or ""
    missing = sorted(name for name in SUBMODULES if f"``{name}``" not in doc)
    assert not missing, f"cloister_core's docstring does not place: {missing}"


def test_only_submodules_are_imported_from_the_package() -> None:
    sources = [
        path
        for top in ("packages", "tests", "benchmarks")
        for path in (ROOT / top).rglob("*.py")
        if ".venv" not in path.parts
    ]
    wrong = [
        f"{path.relative_to(ROOT)}:{node.lineno}: {alias.name}"
        for path in sources
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.ImportFrom) and node.module == "cloister_core" and not node.level
        for alias in node.names
        if alias.name not in SUBMODULES
    ]
    assert not wrong, "names imported from cloister_core, not from its submodule:\n" + "\n".join(
        wrong
    )


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
