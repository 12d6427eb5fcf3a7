"""The shape of cloister-cli: a click face (``commands/``) over a library of subpackages.

The library never imports click or rich (it prints nothing: it returns values and raises,
and takes callbacks for progress); the commands reach the library only through the public
names of its packages (a package's ``__all__``), never through a module's insides; and the
click layer stays small (what grows is the library, where it can be tested without a
terminal).
"""

from __future__ import annotations

import ast
import importlib
from collections.abc import Iterator
from pathlib import Path

import cloister_cli

PACKAGE = Path(cloister_cli.__file__).parent
FACE = PACKAGE / "commands"
FACE_LINES = 3500
# Modules at the package's top that both sides use: the shared context of a command.
SHARED = {"cloister_cli", "cloister_cli.context"}
PRINTING = ("click", "rich")


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def sources(directory: Path) -> Iterator[Path]:
    return iter(sorted(directory.rglob("*.py")))


def imports(path: Path) -> Iterator[tuple[int, str, tuple[str, ...]]]:
    """(line, module, names) of every import in *path*, those inside functions too."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name, ()
        elif isinstance(node, ast.ImportFrom) and node.module is not None and not node.level:
            yield node.lineno, node.module, tuple(alias.name for alias in node.names)


def is_package(module: str) -> bool:
    return (PACKAGE.parent / module.replace(".", "/") / "__init__.py").is_file()


def test_the_library_neither_prints_nor_imports_click() -> None:
    found = [
        f"{path.relative_to(PACKAGE)}:{line} imports {module}"
        for path in sources(PACKAGE)
        if not path.is_relative_to(FACE)
        for line, module, _ in imports(path)
        if module.split(".")[0] in PRINTING
    ]
    assert found == []


def test_the_commands_use_only_the_packages_public_names() -> None:
    found: list[str] = []
    for path in sources(FACE):
        for line, module, names in imports(path):
            where = f"{path.relative_to(PACKAGE)}:{line}"
            if not module.startswith("cloister_cli") or module in SHARED:
                continue
            if module == "cloister_cli.commands" or module.startswith("cloister_cli.commands."):
                continue
            if not names:
                found.append(f"{where}: import {module}")
            elif not is_package(module):
                found.append(f"{where}: from {module} (a module, not a package)")
            else:
                public = set(getattr(importlib.import_module(module), "__all__", ()))
                found += [
                    f"{where}: {module}.{name} is not in its __all__"
                    for name in names
                    if name not in public
                ]
    assert found == []


def test_every_library_package_says_what_it_exports() -> None:
    packages = [
        module_name(path)
        for path in PACKAGE.glob("*/__init__.py")
        if path.parent.name not in {"commands", "inside"}
    ]
    assert len(packages) >= 7
    missing = [name for name in packages if not hasattr(importlib.import_module(name), "__all__")]
    assert missing == []
    for name in packages:
        package = importlib.import_module(name)
        for exported in package.__all__:
            assert (
                hasattr(package, exported)
                or (PACKAGE.parent / name.replace(".", "/") / f"{exported}.py").is_file()
                or is_package(f"{name}.{exported}")
            ), f"{name}.__all__ names {exported!r}"


def test_the_click_layer_stays_small() -> None:
    lines = sum(len(path.read_text(encoding="utf-8").splitlines()) for path in sources(FACE))
    assert lines <= FACE_LINES, f"commands/ has {lines} lines (at most {FACE_LINES})"
