"""``cloister start``'s imports: what a plain start (no devcontainer.json, no Features)
never runs stays unimported, in a fresh interpreter, as the command loads its modules."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

# Imported when a start has a devcontainer.json (its parser, model and Features), or
# lifecycle commands to run: a plain start reads none of them.
LAZY = (
    "cloister_core.devcontainer.loader",
    "cloister_core.devcontainer.model",
    "cloister_core.devcontainer.featureset",
    "cloister_core.devcontainer.features",
    "cloister_core.devcontainer.compose",
    "cloister_cli.images.features.resolve",
    "cloister_cli.images.features.layers",
    "cloister_cli.images.features.oci",
    "cloister_cli.start.devlifecycle",
)

# As `cloister start` does: the group finds the command, which imports the start's
# library modules; then a plain project's devcontainer is looked for (there is none).
PROBE = """
import json, sys
from pathlib import Path

import click

from cloister_cli.commands.main import cli

command = cli.get_command(click.Context(cli), "start")
from cloister_cli.context import Context
from cloister_cli.start import apply, plan
from cloister_core.paths import CloisterPaths

root = Path(sys.argv[2])
context = Context(paths=CloisterPaths(root / "config", root / "data"), home=root)
options = plan.StartOptions(project_name="api")
assert plan.load_project_devcontainer(context, root, options) is None
with open(sys.argv[1], "w") as out:
    json.dump(sorted(sys.modules), out)
"""


def start_imports(tmp_path: Path) -> set[str]:
    listing = tmp_path / "modules.json"
    subprocess.run(
        [sys.executable, "-c", PROBE, str(listing), str(tmp_path)],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return set(json.loads(listing.read_text(encoding="utf-8")))


def test_a_plain_start_imports_no_devcontainer_parser_nor_features(tmp_path: Path) -> None:
    modules = start_imports(tmp_path)
    assert {"cloister_cli.start.apply", "cloister_core.devcontainer.discovery"} <= modules
    assert sorted(modules.intersection(LAZY)) == []


def test_a_devcontainer_name_is_imported_when_first_used(tmp_path: Path) -> None:
    # The package's names stay its API: asked for, each is imported from its module.
    probe = (
        "import sys\n"
        "from cloister_core.devcontainer import Devcontainer, render_lock\n"
        "print(Devcontainer.__module__, render_lock.__module__,"
        " 'cloister_core.devcontainer.loader' in sys.modules)\n"
    )
    ran = subprocess.run(
        [sys.executable, "-c", probe], check=True, capture_output=True, text=True, timeout=60
    )
    assert ran.stdout.split() == [
        "cloister_core.devcontainer.model",
        "cloister_core.devcontainer.featurelock",
        "False",
    ]
