"""``cloister start``'s and ``cloister stop``'s imports: what a plain start (no
devcontainer.json, no Features) or a stop never runs stays unimported, in a fresh
interpreter, as the command loads its modules."""

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


# Never run by a stop: the agents' modules and the credentials' models (a stop disarms
# their state directories by name), the guardrails and the project's shape (a start's),
# the guardian's images and executor; the syncer's module comes on a thread, with the
# sync, only when there are commits to bring back.
STOP_LAZY = (
    "cloister_cli.agents.base",
    "cloister_cli.agents.claude",
    "cloister_cli.agents.codex",
    "cloister_cli.agents.gemini",
    "cloister_core.credentials",
    "cloister_cli.inside.guardrails",
    "cloister_cli.images.shape",
    "cloister_cli.images.builds",
    "cloister_cli.stack.guardian",
    "cloister_cli.stack.executor_process",
    "cloister_executor.protocol",
    "cloister_executor.gitsync",
)

# As `cloister stop` does: the group finds the command, which imports the stop's library
# module; then the agents' state directories of a project are disarmed (there are none).
STOP_PROBE = """
import json, sys
from pathlib import Path

import click

from cloister_cli.commands.main import cli

command = cli.get_command(click.Context(cli), "stop")
from cloister_cli.commands.review import print_report
from cloister_cli.session import ending
from cloister_cli.agents import agentstate
from cloister_core.paths import CloisterPaths

root = Path(sys.argv[2])
assert agentstate.disarm(CloisterPaths(root / "config", root / "data"), "api") == []
with open(sys.argv[1], "w") as out:
    json.dump(sorted(sys.modules), out)
"""


def test_a_stop_imports_what_it_runs(tmp_path: Path) -> None:
    listing = tmp_path / "modules.json"
    subprocess.run(
        [sys.executable, "-c", STOP_PROBE, str(listing), str(tmp_path)],
        check=True,
        capture_output=True,
        timeout=60,
    )
    modules = set(json.loads(listing.read_text(encoding="utf-8")))
    assert {"cloister_cli.session.ending", "cloister_cli.agents.agentstate"} <= modules
    assert sorted(modules.intersection(STOP_LAZY)) == []


def test_an_agent_is_imported_when_first_used() -> None:
    probe = (
        "import sys\n"
        "from cloister_cli import agents\n"
        "print('cloister_cli.agents.claude' in sys.modules, agents.NAMES == tuple(agents.AGENTS),"
        " agents.HomeFile.__module__, 'cloister_cli.agents.claude' in sys.modules)\n"
    )
    ran = subprocess.run(
        [sys.executable, "-c", probe], check=True, capture_output=True, text=True, timeout=60
    )
    assert ran.stdout.split() == ["False", "True", "cloister_cli.agents.base", "True"]
