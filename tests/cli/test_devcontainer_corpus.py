"""Issue 22 acceptance 3: real devcontainer.json files that use Features or compose plan.

The corpus (tests/cli/fixtures/devcontainer_corpus, see its README.md) holds the
reference devcontainers CLI's test configurations and the official templates that are
compose-based or use Features. Each entry is copied into a fresh git repository and
``cloister start --dry-run --json`` must plan it: exit 0, the plan naming each of its
Features and compose services. A Feature from a registry this machine cannot reach
plans as "not fetched" (a dry run fetches on the host and says why it could not).

A dry run starts no guardian and builds nothing, but the images the files name must be
on the engine (Cloister pulls nothing): each missing one is tagged from the local
``debian:bookworm-slim`` for the module, and exactly those tags are removed after.

At the end of the module the share that planned is printed, by category (compose,
features, both), with each failure's first error line grouped by cause.
"""

from __future__ import annotations

import json
import re
import shutil
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import docker
import docker.errors
import pytest
from ruamel.yaml import YAML

from tests.cli.cli_support import BASE_IMAGE, SLIM_IMAGE, CloisterCli, Result, git, make_repo

pytestmark = pytest.mark.docker

CORPUS = Path(__file__).parent / "fixtures" / "devcontainer_corpus"
DRY_RUN_TIMEOUT = 120.0
CONFIG = f"""\
# Written by tests/cli/test_devcontainer_corpus.py
defaults:
  image: {SLIM_IMAGE}
  memory: 512m
  cpus: 1.5
  pids: 256
"""
Category = Literal["compose", "features", "both"]


@dataclass(frozen=True, slots=True)
class Entry:
    id: str  # <source>/<name>, the folder under CORPUS
    category: Category
    images: tuple[str, ...]  # what the files name (image, FROM, compose images)
    devcontainer: str | None  # a file in a subfolder of .devcontainer: given explicitly

    @property
    def folder(self) -> Path:
        return CORPUS / self.id


def _entries() -> list[Entry]:
    manifest = json.loads((CORPUS / "corpus.json").read_text(encoding="utf-8"))
    return [
        Entry(item["id"], item["category"], tuple(item["images"]), item["devcontainer"])
        for item in manifest["entries"]
    ]


ENTRIES = _entries()

# Entries that cannot plan because they need the network when they run, each with why.
# xfail(strict=True): one that starts planning is noticed (and moved out of here).
NEEDS_NETWORK: dict[str, str] = {}

# Entries Cloister must refuse (as the reference CLI does), cleanly: exit 1, no
# traceback, the error naming what is wrong (a case-insensitive fragment).
REFUSED: dict[str, tuple[str, str]] = {
    # a dependsOn cycle a -> b -> c -> a among local Features: no install order exists
    "cli-features/dependsOn-invalid-circular": ("cycle", "dependsOn cycle"),
    # an installsAfter cycle a -> b -> c -> a: no install order exists
    "cli-features/installsAfter-invalid-circular": ("cycle", "installsAfter cycle"),
}


def _case(entry: Entry) -> Any:
    marks: list[pytest.MarkDecorator] = []
    if entry.id in NEEDS_NETWORK:
        marks.append(pytest.mark.xfail(reason=NEEDS_NETWORK[entry.id], strict=True))
    return pytest.param(entry, id=entry.id, marks=marks)


# --- what an entry asks for ----------------------------------------------------------


def _devcontainer_path(entry: Entry, root: Path) -> Path:
    if entry.devcontainer is not None:
        return root / entry.devcontainer
    for candidate in (".devcontainer/devcontainer.json", ".devcontainer.json"):
        if (root / candidate).is_file():
            return root / candidate
    raise AssertionError(f"{entry.id}: no devcontainer.json")


def _document(entry: Entry) -> dict[str, Any]:
    """The entry's devcontainer.json, read here (not by Cloister: that is under test)."""
    path = _devcontainer_path(entry, entry.folder)
    text = path.read_text(encoding="utf-8")
    document: dict[str, Any] = json.loads(_strip_jsonc(text))
    return document


def _strip_jsonc(text: str) -> str:
    """*text* without ``//`` and ``/* */`` comments or trailing commas (strings kept)."""
    out: list[str] = []
    index, length = 0, len(text)
    while index < length:
        char = text[index]
        if char == '"':
            end = index + 1
            while end < length and text[end] != '"':
                end += 2 if text[end] == "\\" else 1
            out.append(text[index : end + 1])
            index = end + 1
        elif text.startswith("//", index):
            newline = text.find("\n", index)
            index = length if newline < 0 else newline
        elif text.startswith("/*", index):
            index = text.index("*/", index) + 2
        elif char in "}]":
            while out and out[-1].isspace():
                out.pop()
            if out and out[-1] == ",":
                out.pop()
            out.append(char)
            index += 1
        else:
            out.append(char)
            index += 1
    return "".join(out)


def _feature_ids(entry: Entry) -> list[str]:
    features = _document(entry).get("features") or {}
    return list(features)


def _compose_services(entry: Entry) -> list[str]:
    """The services a compose devcontainer runs besides its primary one."""
    document = _document(entry)
    files = document.get("dockerComposeFile")
    if not files:
        return []
    base = _devcontainer_path(entry, entry.folder).parent
    names: list[str] = []
    for name in [files] if isinstance(files, str) else files:
        loaded = YAML(typ="rt").load((base / name).read_text(encoding="utf-8")) or {}
        names += [str(service) for service in loaded.get("services") or {}]
    wanted = document.get("runServices")
    chosen = [name for name in dict.fromkeys(names) if wanted is None or name in wanted]
    return [name for name in chosen if name != document.get("service")]


# --- the engine's images ---------------------------------------------------------------


def _qualified(name: str) -> str:
    """*name* with the tag docker assumes (``alpine`` is ``alpine:latest``)."""
    last = name.rsplit("/", 1)[-1]
    return name if ":" in last else f"{name}:latest"


@pytest.fixture(scope="module")
def corpus_images(docker_client: docker.DockerClient) -> Iterator[None]:
    """Every image the corpus names, on the engine: a missing one tagged from the base
    image; only those tags are removed at the end (and only while still the base's)."""
    base = docker_client.images.get(BASE_IMAGE)
    added: list[str] = []
    try:
        for name in sorted({_qualified(image) for entry in ENTRIES for image in entry.images}):
            try:
                docker_client.images.get(name)
            except docker.errors.ImageNotFound:
                repository, tag = name.rsplit(":", 1)
                assert base.tag(repository, tag), name
                added.append(name)
        yield
    finally:
        for name in added:
            try:
                current = docker_client.images.get(name)
            except docker.errors.ImageNotFound:
                continue
            if current.id == base.id:  # untags: the base image keeps its own name
                docker_client.images.remove(name, noprune=True)


@pytest.fixture(scope="module")
def corpus_cli(tmp_path_factory: pytest.TempPathFactory) -> CloisterCli:
    """``cloister`` with its own config and data directories; a dry run starts no guardian."""
    tool = CloisterCli(tmp_path_factory.mktemp("cloister-corpus"))
    tool.write_config(CONFIG)
    return tool


# --- the share ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Outcome:
    entry: Entry
    expected: Literal["plan", "refusal"]
    met: bool  # planned, or refused cleanly, as expected
    error: str  # the first line of what the CLI said (or what was missing), when not met


@pytest.fixture(scope="module")
def outcomes(request: pytest.FixtureRequest) -> Iterator[list[Outcome]]:
    """Each case's outcome; the share that planned is printed when the module ends."""
    found: list[Outcome] = []
    yield found
    plugins = request.config.pluginmanager
    reporter = plugins.getplugin("terminalreporter")
    capture = plugins.getplugin("capturemanager")
    if reporter is None or capture is None or not found:
        return
    with capture.global_and_fixture_disabled():  # shown even when the tests pass
        for line in share_report(found):
            reporter.write_line(line)


def share_report(found: list[Outcome]) -> list[str]:
    """The share that planned by category, the refusals, and what was not met by cause."""
    totals: Counter[str] = Counter()
    met: Counter[str] = Counter()
    for outcome in found:
        key = outcome.entry.category if outcome.expected == "plan" else "refusal"
        totals[key] += 1
        met[key] += outcome.met
    planning = ("compose", "features", "both")
    lines = ["", "devcontainer corpus: planned / expected to plan"]
    for category in planning:
        if totals[category]:
            lines.append(f"  {category:<9} {met[category]:>3} / {totals[category]}")
    planned = sum(met[category] for category in planning)
    lines.append(f"  {'all':<9} {planned:>3} / {sum(totals[category] for category in planning)}")
    if totals["refusal"]:
        lines.append(
            f"  refused cleanly (as the reference does): {met['refusal']} / {totals['refusal']}"
        )
    causes: defaultdict[str, list[str]] = defaultdict(list)
    for outcome in found:
        if not outcome.met:
            causes[outcome.error].append(outcome.entry.id)
    for error, ids in sorted(causes.items(), key=lambda item: -len(item[1])):
        lines.append(f"  not met ({len(ids)}): {error}")
        lines += [f"    - {each}" for each in ids]
    return lines


def _first_error(result: Result, repo: Path) -> str:
    """What the CLI said first (its error), the project's path and lines taken out, so
    that entries failing for the same cause group together."""
    text = result.stderr.replace(str(repo), "<project>")
    text = re.sub(r"(\.(?:json|ya?ml)):\d+(?::\d+)?:", r"\1:<line>:", text)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if "Traceback" in result.stderr:
        return f"traceback: {lines[-1] if lines else '?'}"
    return lines[0] if lines else f"exit {result.returncode}, nothing on stderr"


# --- the cases ---------------------------------------------------------------------------


def _project(entry: Entry, parent: Path) -> Path:
    """A git repository holding the entry's files, committed (as a merged branch is)."""
    repo = make_repo(parent / f"corpus-{entry.id.rsplit('/', 1)[-1].lower()}"[:40])
    shutil.copytree(entry.folder, repo, dirs_exist_ok=True)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "devcontainer")
    return repo


def _dry_run(cli: CloisterCli, entry: Entry, repo: Path, *extra: str) -> Result:
    given = ("--devcontainer", str(repo / entry.devcontainer)) if entry.devcontainer else ()
    return cli.run("start", "--dry-run", *given, *extra, cwd=repo, timeout=DRY_RUN_TIMEOUT)


def _unplanned(entry: Entry, result: Result) -> str | None:
    """What keeps *result* from being a plan of *entry* (None: it plans it).

    A plan exits 0 with the docker run of the cloister, and names what it would install
    and run: each Feature of the file (in its Features, fetched or with why it was not,
    or as an override saying why it was refused) and each compose service besides the
    cloister (in its services).
    """
    if result.returncode != 0:
        return f"exit {result.returncode}"
    if "Traceback" in result.output:
        return "a traceback"
    plan = result.json()
    if plan.get("devcontainer") is None:
        return "no devcontainer in the plan"
    if plan["docker_run"][:2] != ["docker", "run"]:
        return "no docker run in the plan"
    shown = [str(item["id"]) for item in plan.get("features") or []]
    shown += [str(item["field"]) for item in plan["devcontainer"]["overrides"]]
    for feature in _feature_ids(entry):
        spelled = (f"features.{feature}", f"[{feature!r}]", f"[{json.dumps(feature)}]")
        if not any(feature == each or any(form in each for form in spelled) for each in shown):
            return f"Feature {feature!r} not in the plan"
    services = {str(item["name"]) for item in plan.get("services") or []}
    for service in _compose_services(entry):
        if service not in services:
            return f"compose service {service!r} not in the plan"
    return None


@pytest.mark.parametrize("entry", [_case(entry) for entry in ENTRIES if entry.id not in REFUSED])
@pytest.mark.usefixtures("corpus_images")
def test_the_entry_plans(
    corpus_cli: CloisterCli, outcomes: list[Outcome], entry: Entry, tmp_path: Path
) -> None:
    repo = _project(entry, tmp_path)
    result = _dry_run(corpus_cli, entry, repo, "--json")
    problem = _unplanned(entry, result)
    error = _first_error(result, repo) if result.returncode != 0 else problem or ""
    outcomes.append(Outcome(entry, "plan", problem is None, error))
    assert problem is None, f"{problem}\n{result.describe()}"


@pytest.mark.parametrize("entry", [_case(entry) for entry in ENTRIES if entry.id in REFUSED])
@pytest.mark.usefixtures("corpus_images")
def test_the_entry_is_refused_cleanly(
    corpus_cli: CloisterCli, outcomes: list[Outcome], entry: Entry, tmp_path: Path
) -> None:
    fragment, what = REFUSED[entry.id]
    repo = _project(entry, tmp_path)
    result = _dry_run(corpus_cli, entry, repo, "--json")
    clean = result.returncode == 1 and "Traceback" not in result.output
    met = clean and fragment in result.stderr.lower()
    error = _first_error(result, repo) if result.returncode != 0 else f"{what} planned"
    outcomes.append(Outcome(entry, "refusal", met, error))
    assert result.returncode == 1, f"{what} not refused\n{result.describe()}"
    assert "Traceback" not in result.output, result.describe()
    assert fragment in result.stderr.lower(), result.describe()


# Text form: one compose template and one with local Features depending on each other.
TEXT_CASES = ("templates/postgres", "cli-features/dependsOn-local-with-options")


@pytest.mark.parametrize("entry", [_case(entry) for entry in ENTRIES if entry.id in TEXT_CASES])
@pytest.mark.usefixtures("corpus_images")
def test_the_text_plan_names_features_and_services(
    corpus_cli: CloisterCli, entry: Entry, tmp_path: Path
) -> None:
    repo = _project(entry, tmp_path)
    result = _dry_run(corpus_cli, entry, repo)
    assert result.returncode == 0, result.describe()
    assert result.stdout.startswith("cloister start --dry-run:"), result.describe()
    for feature in _feature_ids(entry):
        assert feature in result.stdout, f"{feature!r} not in the text plan\n{result.describe()}"
    for service in _compose_services(entry):
        shown = re.search(rf"^service\s+{re.escape(service)}\b", result.stdout, re.MULTILINE)
        assert shown, f"service {service!r} not in the text plan\n{result.describe()}"
