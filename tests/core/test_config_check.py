"""``check_configuration``: every file loaded, every error kept, warnings at their lines."""

from __future__ import annotations

from pathlib import Path

import pytest

from cloister_core import credentials
from cloister_core.config import ensure_default_config
from cloister_core.config.check import check_configuration
from cloister_core.paths import CloisterPaths
from cloister_core.suffixes import PublicSuffixes


@pytest.fixture(scope="module")
def suffixes() -> PublicSuffixes:
    return PublicSuffixes()


@pytest.fixture
def paths(tmp_path: Path) -> CloisterPaths:
    paths = CloisterPaths(config_dir=tmp_path / "config", data_dir=tmp_path / "data")
    # One AI provider decided, so that only the case under test warns.
    write(paths.global_decisions, "allow:\n  - domain: api.anthropic.com\n")
    return paths


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


# (config.yaml, kind, line, column, message fragment); None: no warning at all.
GLOBAL_CASES = [
    (
        "proxy:\n  allow:\n    - domain: a.test\n    - pattern: '*.com'\n",
        ("public-suffix", 4, 16, "allow pattern '*.com' opens every site anyone registers"),
    ),
    (
        "proxy:\n  allow:\n    - pattern: '**.co.uk'\n",
        ("public-suffix", 3, 16, "under 'co.uk' (a public suffix)"),
    ),
    ("proxy:\n  allow: [{pattern: '*.github.io'}]\n", ("public-suffix", 2, 21, "'github.io'")),
    (
        "proxy:\n  allow:\n    - domain: com\n",
        ("top-level-domain", 3, 15, "allow domain 'com' is a top-level domain, not a site"),
    ),
    (
        "proxy:\n  allow:\n    - domain: co.uk\n",
        ("top-level-domain", 3, 15, "'co.uk' is a public suffix, not a site"),
    ),
    ("proxy:\n  deny:\n    - pattern: '*.com'\n", None),  # a deny closes: fine
    ("proxy:\n  allow:\n    - pattern: '*.intranet'\n", None),  # not a listed suffix
    ("proxy:\n  allow:\n    - pattern: '*.example.co.uk'\n", None),
    (
        "hostexec:\n  auto_approve:\n    - pattern: '.*'\n",
        ("approves-anything", 3, 16, "auto_approve pattern '.*' approves any command"),
    ),
    ("hostexec:\n  auto_approve: [{pattern: '^.*$'}]\n", ("approves-anything", 2, 28, "any")),
    ("hostexec:\n  auto_approve: [{pattern: '.+'}]\n", ("approves-anything", 2, 28, "any")),
    (
        "hostexec:\n  auto_approve: [{pattern: '^(git status|.*)$'}]\n",
        ("approves-anything", 2, 28, "approves any command"),
    ),
    (
        "hostexec:\n  auto_approve:\n    - pattern: '^sh .*$'\n",
        ("approves-anything", 3, 16, "approves \"sh -c 'curl"),
    ),
    (
        "hostexec:\n  auto_approve:\n    - pattern: '^docker( .*)?$'\n",
        ("approves-anything", 3, 16, "'docker run --privileged -v /:/host debian'"),
    ),
    ("hostexec:\n  auto_approve:\n    - pattern: '^make test$'\n", None),
    ("hostexec:\n  auto_approve:\n    - pattern: '^git (status|diff)( .*)?$'\n", None),
    ("hostexec:\n  manual_approve:\n    - pattern: '.*'\n", None),  # a human decides
    (
        "proxy:\n  allow_private_networks: ['0.0.0.0/0']\n",
        ("private-network", 2, 28, "'0.0.0.0/0' holds every address"),
    ),
    (
        "proxy:\n  allow_private_networks:\n    - 10.1.0.0/16\n    - ::/0\n",
        ("private-network", 4, 7, "'::/0' holds every address"),
    ),
    (
        "proxy:\n  allow_private_networks: [169.254.0.0/16]\n",
        ("private-network", 2, 28, "includes 169.254.169.254, the cloud metadata service"),
    ),
    (
        "proxy:\n  allow_private_networks: [127.0.0.0/8]\n",
        ("private-network", 2, 28, "includes 127.0.0.1, the proxy's own loopback"),
    ),
    ("proxy:\n  allow_private_networks: [192.168.10.0/24]\n", None),
    ("proxy:\n  allow_private_networks: [10.1.0.0/16, 172.16.5.0/24]\n", None),
    (
        "proxy:\n  allow_private_networks: [172.16.0.0/12]\n",
        (
            "private-network",
            2,
            28,
            "'172.16.0.0/12' covers Docker's default address pools (172.17.0.0/16 to"
            " 172.31.0.0/16): the guardian's own networks stay refused anyway, but other"
            " containers on this Docker engine become reachable from cloisters",
        ),
    ),
    (
        "proxy:\n  allow_private_networks:\n    - 192.168.0.0/16\n",
        ("private-network", 3, 7, "pools (192.168.0.0/20 to 192.168.240.0/20)"),
    ),
    (
        "proxy:\n  allow_private_networks: [172.20.0.0/16]\n",
        ("private-network", 2, 28, "covers Docker's default address pools (172.20.0.0/16)"),
    ),
    (
        "proxy:\n  allow_private_networks: [10.0.0.0/8]\n",
        (
            "private-network",
            2,
            28,
            "'10.0.0.0/8' overlaps Cloister's network pool '10.213.0.0/16'"
            " (guardian.network_pool): the cloisters' networks are the guardian's own and stay"
            " refused anyway",
        ),
    ),
    (
        "guardian:\n  network_pool: 10.99.0.0/16\nproxy:\n  allow_private_networks:\n"
        "    - 10.213.0.0/16\n    - 10.99.4.0/24\n",
        ("private-network", 6, 7, "'10.99.4.0/24' overlaps Cloister's network pool '10.99.0.0/16'"),
    ),
]


@pytest.mark.parametrize(("text", "expected"), GLOBAL_CASES)
def test_global_config_warnings(
    paths: CloisterPaths,
    suffixes: PublicSuffixes,
    text: str,
    expected: tuple[str, int, int, str] | None,
) -> None:
    write(paths.config_file, text)
    report = check_configuration(paths, None, suffixes=suffixes)
    assert report.errors == ()
    found = [(w.kind, w.line, w.column, w.message) for w in report.warnings]
    if expected is None:
        assert found == []
        return
    kind, line, column, fragment = expected
    assert len(found) == 1, found
    assert found[0][:3] == (kind, line, column)
    assert fragment in found[0][3]
    rendered = report.warnings[0].render()
    assert rendered.startswith(f"{paths.config_file}:{line}:{column}: warning: ")


@pytest.mark.parametrize(
    ("config", "decisions", "line"),
    [
        ("", "", 1),  # an emptied file
        ("# nothing\nproxy:\n  allow: []\n", "", 3),
        ("proxy:\n  allowed_ports: [443]\n", "", 2),  # no allow list: points at proxy
        ("proxy:\n  allow:\n    - domain: docs.example.org\n", "", 3),
    ],
)
def test_no_ai_provider_rule_warns(
    paths: CloisterPaths, suffixes: PublicSuffixes, config: str, decisions: str, line: int
) -> None:
    write(paths.config_file, config)
    write(paths.global_decisions, decisions)
    report = check_configuration(paths, None, suffixes=suffixes)
    [warning] = report.warnings
    assert (warning.kind, warning.path, warning.line) == (
        "no-ai-providers",
        paths.config_file,
        line,
    )
    assert "api.anthropic.com, api.openai.com, generativelanguage.googleapis.com" in (
        warning.message
    )


@pytest.mark.parametrize(
    "config",
    [
        "proxy:\n  allow: [{domain: api.openai.com}]\n",
        "proxy:\n  deny: [{domain: api.openai.com}]\n",  # decided against: deliberate
        "proxy:\n  allow: [{pattern: '*.anthropic.com'}]\n",
    ],
)
def test_any_ai_provider_rule_is_enough(
    paths: CloisterPaths, suffixes: PublicSuffixes, config: str
) -> None:
    write(paths.config_file, config)
    write(paths.global_decisions, "")
    assert check_configuration(paths, None, suffixes=suffixes).warnings == ()


def test_the_default_config_does_not_warn(paths: CloisterPaths, suffixes: PublicSuffixes) -> None:
    ensure_default_config(paths.config_file)
    write(paths.global_decisions, "")
    report = check_configuration(paths, None, suffixes=suffixes)
    assert (report.errors, report.warnings) == ((), ())
    assert report.domain_rules == 23


def test_project_and_decision_files_warn_at_their_lines(
    paths: CloisterPaths, suffixes: PublicSuffixes
) -> None:
    write(paths.config_file, "proxy:\n  allow: [{domain: api.openai.com}]\n")
    project = write(
        paths.project_config("my-api"),
        "root: /x\nproxy:\n  allow:\n    - pattern: '**.com'\n"
        "hostexec:\n  auto_approve:\n    - pattern: '^make$'\n    - pattern: '.*'\n",
    )
    decisions = write(paths.project_decisions("my-api"), "allow:\n  - pattern: '*.co.uk'\n")
    global_decisions = write(paths.global_decisions, "allow:\n  - domain: uk\n")
    report = check_configuration(paths, "my-api", suffixes=suffixes)
    assert report.errors == ()
    assert [(w.path, w.line, w.kind) for w in report.warnings] == [
        (project, 4, "public-suffix"),
        (project, 8, "approves-anything"),
        (global_decisions, 2, "top-level-domain"),
        (decisions, 2, "public-suffix"),
    ]
    assert [file.scope for file in report.files] == [
        "global",
        "project",
        "global-decisions",
        "project-decisions",
    ]
    assert report.project_config is not None
    assert report.project_config.root == "/x"


def test_every_broken_file_is_reported(paths: CloisterPaths, suffixes: PublicSuffixes) -> None:
    write(paths.config_file, "proxy:\n  alow: []\n")
    project = write(paths.project_config("p"), "proxy:\n\tallow: []\n")
    write(paths.global_decisions, "allow:\n  - pattern: '*.com'\n")
    report = check_configuration(paths, "p", suffixes=suffixes)
    assert [error.path for error in report.errors] == [paths.config_file, project]
    assert [file.state for file in report.files] == ["invalid", "invalid", "ok", "absent"]
    assert report.domain_rules is None
    assert report.project_config is None
    # The files that loaded are still linted.
    assert [w.kind for w in report.warnings] == ["public-suffix"]


@pytest.mark.parametrize(
    ("methods", "warned"),
    [
        ({"claude": "api-key"}, None),  # through the credential gateway: no rule needed
        ({"claude": "oauth-token", "codex": "api-key"}, None),
        ({"claude": "api-key", "codex": "existing-login"}, "api.openai.com),"),
        ({"gemini": "existing-login"}, "generativelanguage.googleapis.com),"),
    ],
)
def test_agents_on_the_credential_gateway_need_no_provider_rule(
    paths: CloisterPaths,
    suffixes: PublicSuffixes,
    methods: dict[str, credentials.Method],
    warned: str | None,
) -> None:
    write(paths.config_file, "proxy:\n  allow: [{domain: docs.example.org}]\n")
    write(paths.global_decisions, "")
    for agent, method in methods.items():
        credentials.store(paths, agent, method, None if method == "existing-login" else "s3cret")
    report = check_configuration(paths, None, suffixes=suffixes)
    found = [warning.message for warning in report.warnings if warning.kind == "no-ai-providers"]
    if warned is None:
        assert found == []
    else:
        [message] = found
        assert f"no rule allows the AI providers' APIs ({warned}" in message


def test_the_go_implementations_first_run_file_checks_with_warnings(
    paths: CloisterPaths, suffixes: PublicSuffixes
) -> None:
    reference = Path(__file__).parent / "config" / "fixtures" / "reference"
    text = (reference / "first-run.yaml").read_text(encoding="utf-8")
    write(paths.config_file, text)
    report = check_configuration(paths, None, suffixes=suffixes)
    assert report.errors == ()
    assert report.domain_rules == 33  # its 32, and the global decision
    kinds = {warning.kind for warning in report.warnings}
    assert kinds == {"ignored-key"}
    lines = text.splitlines()
    for warning in report.warnings:
        key = warning.message.split(" ", 1)[0].rsplit(".", 1)[-1]
        assert warning.line is not None
        assert lines[warning.line - 1].lstrip().startswith(f"{key}:"), warning.render()
    assert len(report.warnings) == len({warning.message for warning in report.warnings}) == 13
