"""Image fingerprints (an image built from another version of the tree is rebuilt), and
what a build shows: whole lines as it runs, the failing step and its output when it fails."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import docker
import pytest

from cloister_cli.images.builds import (
    PROXY_IMAGE,
    SERVICE_STAGE,
    SLIM_AGENT_IMAGE,
    SOURCE_LABEL,
    TAIL_LINES,
    BuildOutput,
    ImageBuildError,
    build_image,
    dockerfile_text,
    is_current,
    source_fingerprint,
)
from cloister_core import stack
from tests.fake_engine import FakeEngine

REPOSITORY = Path(__file__).resolve().parents[3]


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A copy of what the proxy and slim images are built from."""
    copy = tmp_path / "tree"
    for relative in (
        "uv.lock",
        PROXY_IMAGE.dockerfile,
        SERVICE_STAGE,
        SLIM_AGENT_IMAGE.dockerfile,
        "services/healthcheck.py",
        "images/hostexec/hostexec",
    ):
        (copy / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPOSITORY / relative, copy / relative)
    for package in ("cloister-core", "cloister-proxy"):
        source, target = REPOSITORY / "packages" / package, copy / "packages" / package
        target.mkdir(parents=True)
        shutil.copy2(source / "pyproject.toml", target / "pyproject.toml")
        shutil.copytree(
            source / "src", target / "src", ignore=shutil.ignore_patterns("__pycache__")
        )
    return copy


def test_the_fingerprint_follows_the_sources(tree: Path) -> None:
    first = source_fingerprint(tree, PROXY_IMAGE)
    assert source_fingerprint(tree, PROXY_IMAGE) == first
    cache = tree / "packages" / "cloister-proxy" / "src" / "cloister_proxy" / "__pycache__"
    cache.mkdir()
    (cache / "relay.cpython-311.pyc").write_bytes(b"compiled")
    assert source_fingerprint(tree, PROXY_IMAGE) == first  # not a source

    relay = tree / "packages" / "cloister-proxy" / "src" / "cloister_proxy" / "relay.py"
    relay.write_text(relay.read_text(encoding="utf-8") + "\n# changed\n", encoding="utf-8")
    second = source_fingerprint(tree, PROXY_IMAGE)
    assert second != first
    core = tree / "packages" / "cloister-core" / "src" / "cloister_core" / "rules.py"
    core.write_text(core.read_text(encoding="utf-8") + "\n# changed\n", encoding="utf-8")
    assert source_fingerprint(tree, PROXY_IMAGE) != second  # the core is in every image


def test_an_agent_image_depends_on_its_dockerfile_and_hostexec_only(tree: Path) -> None:
    first = source_fingerprint(tree, SLIM_AGENT_IMAGE)
    (tree / "uv.lock").write_text("changed\n", encoding="utf-8")
    assert source_fingerprint(tree, SLIM_AGENT_IMAGE) == first
    hostexec = tree / "images" / "hostexec" / "hostexec"
    hostexec.write_text(hostexec.read_text(encoding="utf-8") + "# changed\n", encoding="utf-8")
    assert source_fingerprint(tree, SLIM_AGENT_IMAGE) != first


def test_a_service_image_follows_the_stage_it_shares(tree: Path) -> None:
    first = source_fingerprint(tree, PROXY_IMAGE)
    stage = tree / SERVICE_STAGE
    stage.write_text(stage.read_text(encoding="utf-8") + "# changed\n", encoding="utf-8")
    assert source_fingerprint(tree, PROXY_IMAGE) != first


def test_the_contexts_dockerfile_is_the_stage_then_the_images_with_the_stack_ports(
    tree: Path,
) -> None:
    text = dockerfile_text(tree, PROXY_IMAGE)
    stage = (tree / SERVICE_STAGE).read_text(encoding="utf-8")
    assert text.startswith(stage)
    assert f"EXPOSE {stack.PROXY_PORT}\n" in text
    assert "${PROXY_PORT}" not in text
    agent = (tree / SLIM_AGENT_IMAGE.dockerfile).read_text(encoding="utf-8")
    assert dockerfile_text(tree, SLIM_AGENT_IMAGE) == agent  # no stage, no port: as it is


def test_a_port_the_stack_lacks_is_refused(tree: Path) -> None:
    dockerfile = tree / PROXY_IMAGE.dockerfile
    dockerfile.write_text(
        dockerfile.read_text(encoding="utf-8") + "EXPOSE ${PROXI_PORT}\n", encoding="utf-8"
    )
    with pytest.raises(ImageBuildError, match=r"'\$\{PROXI_PORT\}' is no port of cloister_core"):
        dockerfile_text(tree, PROXY_IMAGE)


@pytest.mark.parametrize(
    ("labels", "fingerprint", "current"),
    [
        ({SOURCE_LABEL: "abc"}, "abc", True),
        ({SOURCE_LABEL: "abc"}, "def", False),  # built from another tree
        (None, "abc", False),  # built before images had the label
        (None, None, True),  # no source tree to compare with: present is enough
    ],
)
def test_is_current(labels: dict[str, str] | None, fingerprint: str | None, current: bool) -> None:
    engine = FakeEngine()
    engine.add_image("x:latest", labels=labels)
    assert is_current(engine.client, "x:latest", fingerprint) is current


def test_a_missing_image_is_never_current() -> None:
    assert is_current(FakeEngine().client, "x:latest", None) is False


# -- what a build shows ----------------------------------------------------------------

# What the classic builder of Docker 20.10 streams for a RUN step that fails (recorded):
# a step's header and its newline come apart, stderr is wrapped in red, and the
# builder's own notes sit between the output lines.
FAILED_RUN: list[dict[str, Any]] = [
    {"stream": "Step 1/2 : FROM debian:bookworm-slim"},
    {"stream": "\n"},
    {"stream": " ---> ae5986637c7e\n"},
    {"stream": "Step 2/2 : RUN echo building && echo the-reason >&2; exit 3"},
    {"stream": "\n"},
    {"stream": " ---> Running in ebec6e148c85\n"},
    {"stream": "\x1b[91mthe-reason\n\x1b[0m"},
    {"stream": "build"},
    {"stream": "ing\n"},
    {"stream": "Removing intermediate container ebec6e148c85\n"},
    {
        "errorDetail": {"code": 3, "message": "returned a non-zero code: 3"},
        "error": "The command '/bin/sh -c echo building && echo the-reason >&2; exit 3'"
        " returned a non-zero code: 3",
    },
]


def fed(chunks: list[dict[str, Any]]) -> tuple[BuildOutput, list[str]]:
    lines: list[str] = []
    output = BuildOutput(lines.append)
    for chunk in chunks:
        if "stream" in chunk:
            output.feed(chunk["stream"])
    return output, lines


def test_the_progress_gets_whole_lines_without_the_builders_colours() -> None:
    _, lines = fed(FAILED_RUN)
    assert lines == [
        "Step 1/2 : FROM debian:bookworm-slim",
        " ---> ae5986637c7e",
        "Step 2/2 : RUN echo building && echo the-reason >&2; exit 3",
        " ---> Running in ebec6e148c85",
        "the-reason",
        "building",
        "Removing intermediate container ebec6e148c85",
    ]


def test_a_failure_names_the_step_and_shows_its_output() -> None:
    output, _ = fed(FAILED_RUN)
    assert output.failure(FAILED_RUN[-1]["error"]).split("\n") == [
        "The command '/bin/sh -c echo building && echo the-reason >&2; exit 3'"
        " returned a non-zero code: 3",
        "  at Step 2/2 : RUN echo building && echo the-reason >&2; exit 3",
        "  its output:",
        "  | the-reason",
        "  | building",
    ]


def test_a_long_output_is_cut_to_its_last_lines() -> None:
    chunks = [{"stream": "Step 1/1 : RUN make\n"}]
    chunks += [{"stream": f"line {number}\n"} for number in range(1, 101)]
    chunks += [{"stream": "the last words, never ended by a newline"}]
    output, _ = fed(chunks)
    lines = output.failure("returned a non-zero code: 2").split("\n")
    assert lines[:3] == [
        "returned a non-zero code: 2",
        "  at Step 1/1 : RUN make",
        f"  the last {TAIL_LINES} of its 101 lines of output:",
    ]
    assert lines[3:] == [
        *(f"  | line {number}" for number in range(62, 101)),
        "  | the last words, never ended by a newline",
    ]


def test_a_carriage_return_keeps_what_a_terminal_would_show() -> None:
    output, lines = fed([{"stream": "Step 1/1 : RUN x\n"}, {"stream": "10%\r50%\r100%\r\n"}])
    assert lines[-1] == "100%"
    assert output.failure("failed").endswith("  | 100%")


def test_a_step_that_printed_nothing_says_so() -> None:
    output, _ = fed([{"stream": "Step 1/2 : FROM a\n"}, {"stream": "Step 2/2 : COPY x /x\n"}])
    assert output.failure("COPY failed: file not found: stat x") == (
        "COPY failed: file not found: stat x\n  at Step 2/2 : COPY x /x\n  (it printed nothing)"
    )
    assert BuildOutput(lambda line: None).failure("no such image") == "no such image"


def test_build_image_raises_with_the_failing_steps_output(tmp_path: Path) -> None:
    def build(**kwargs: Any) -> Iterator[dict[str, Any]]:
        assert kwargs["path"] == str(tmp_path)
        yield from FAILED_RUN

    client = cast("docker.DockerClient", SimpleNamespace(api=SimpleNamespace(build=build)))
    shown: list[str] = []
    with pytest.raises(ImageBuildError) as raised:
        build_image(client, tmp_path, "x:latest", on_line=shown.append)
    message = str(raised.value)
    assert message.startswith("building x:latest: The command '/bin/sh -c echo building")
    assert "\n  at Step 2/2 : RUN echo building && echo the-reason >&2; exit 3\n" in message
    assert message.endswith("\n  | the-reason\n  | building")
    assert shown[-1] == "Removing intermediate container ebec6e148c85"


def test_the_image_is_the_builders_not_one_a_step_printed() -> None:
    stream = [
        {"stream": "Step 1/1 : RUN echo Successfully built deadbeef\n"},
        {"stream": " ---> Running in 1a2b\n"},
        {"stream": "Successfully built deadbeef\n"},
        {"stream": " ---> 0123abcd\n"},
        {"stream": "Successfully built 0123abcd\n"},
    ]
    output = BuildOutput(lambda line: None)
    output.read(iter(stream))
    assert (output.image, output.error) == ("0123abcd", None)
    named = BuildOutput(lambda line: None)
    named.read(iter([{"aux": {"ID": "sha256:0123abcd"}}, *stream]))
    assert named.image == "sha256:0123abcd"


def test_the_stream_is_read_to_its_end_after_an_error() -> None:
    read: list[dict[str, Any]] = []

    def stream() -> Iterator[dict[str, Any]]:
        for chunk in [*FAILED_RUN, {"stream": "after the error\n"}]:
            read.append(chunk)
            yield chunk

    output = BuildOutput(lambda line: None)
    output.read(stream())
    assert len(read) == len(FAILED_RUN) + 1  # nothing left holding the connection
    assert output.error is not None
    assert output.error.endswith("  | the-reason\n  | building")  # the step as it failed
