"""Config models and loading: defaults, validation, and errors that name file and line."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from cloister_core.config import (
    DecisionFile,
    GlobalConfig,
    ProjectConfig,
    default_config_text,
    ensure_default_config,
    load_decision_file,
    load_global_config,
    load_project_config,
    parse_duration,
)
from cloister_core.config.loader import load_model
from cloister_core.errors import ConfigError
from cloister_core.paths import CloisterPaths


@pytest.fixture
def paths(tmp_path: Path) -> CloisterPaths:
    return CloisterPaths(config_dir=tmp_path / "config", data_dir=tmp_path / "data")


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def test_default_config_written_on_first_use(paths: CloisterPaths) -> None:
    assert not paths.config_file.exists()
    config = load_global_config(paths)
    assert paths.config_file.read_text(encoding="utf-8") == default_config_text()
    assert paths.config_file.stat().st_mode & 0o777 == 0o644
    allowed = {entry.target for entry in config.proxy.allow}
    # AI APIs, package registries and documentation, as data in the file.
    assert {"api.anthropic.com", "api.openai.com"} <= allowed
    assert {"pypi.org", "registry.npmjs.org"} <= allowed
    assert {"docs.python.org", "developer.mozilla.org"} <= allowed
    assert config.proxy.allowed_ports == (80, 443)
    assert config.proxy.approval_timeout == timedelta(seconds=60)
    assert config.hostexec.timeout == timedelta(seconds=300)
    assert "#" in default_config_text()  # commented for humans


def test_existing_config_is_never_overwritten(paths: CloisterPaths) -> None:
    write(paths.config_file, "proxy:\n  allowed_ports: [443]\n")
    assert ensure_default_config(paths.config_file) is False
    assert load_global_config(paths).proxy.allowed_ports == (443,)


def test_missing_files_give_defaults(paths: CloisterPaths) -> None:
    assert load_global_config(paths, create=False) == GlobalConfig()
    assert load_project_config(paths, "my-api") == ProjectConfig()
    assert load_decision_file(paths.global_decisions) == DecisionFile()


def test_empty_file_and_empty_lists(paths: CloisterPaths) -> None:
    write(paths.config_file, "# nothing yet\n")
    assert load_global_config(paths) == GlobalConfig()
    write(paths.global_decisions, "allow:\ndeny:\n")
    assert load_decision_file(paths.global_decisions) == DecisionFile()


def test_full_config_parses(paths: CloisterPaths) -> None:
    write(
        paths.config_file,
        """
proxy:
  allow:
    - domain: API.Example.COM.
    - pattern: "*.github.com"
    - {domain: registry.internal, ports: [8443, 443, 8443]}
  deny:
    - domain: evil.example
  unlisted_domain_behavior: reject
  approval_timeout: 1m30s
  allowed_ports: [443]
  allow_private_networks: ["10.1.0.0/16", "fd00::/8"]
hostexec:
  auto_approve:
    - pattern: "^docker ps( .*)?$"
  manual_approve:
    - pattern: "^git push( .*)?$"
  timeout: 250ms
""",
    )
    config = load_global_config(paths)
    assert [entry.target for entry in config.proxy.allow] == [
        "api.example.com",
        "*.github.com",
        "registry.internal",
    ]
    assert config.proxy.allow[2].ports == (443, 8443)
    assert config.proxy.unlisted_domain_behavior == "reject"
    assert config.proxy.approval_timeout == timedelta(seconds=90)
    assert [str(net) for net in config.proxy.allow_private_networks] == ["10.1.0.0/16", "fd00::/8"]
    assert config.hostexec.timeout == timedelta(milliseconds=250)


def test_git_section(paths: CloisterPaths) -> None:
    assert load_global_config(paths).git.fast_forward is True  # the default file says so
    assert "fast_forward: true" in default_config_text()
    assert GlobalConfig().git.fast_forward is True
    write(paths.config_file, "git:\n  fast_forward: false\n")
    assert load_global_config(paths).git.fast_forward is False


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("git:\n  fastforward: false\n", "unknown key 'fastforward' in git"),
        ("git:\n  fast_forward: sometimes\n", "git.fast_forward"),
        ("git: [fast_forward]\n", "git"),
    ],
)
def test_git_section_mistakes(paths: CloisterPaths, text: str, message: str) -> None:
    write(paths.config_file, text)
    with pytest.raises(ConfigError) as caught:
        load_global_config(paths)
    rendered = str(caught.value)
    assert rendered.startswith(f"{paths.config_file}:"), rendered
    assert message in rendered


@pytest.mark.parametrize("mode", ["pause", "undo", "anything"])
def test_the_obsolete_git_guard_is_accepted_and_dropped(paths: CloisterPaths, mode: str) -> None:
    """`hostexec.git_guard` configured the guard of the human's .git, gone now that every
    cloister has a git directory of its own: a config that still sets it loads."""
    write(paths.config_file, f"hostexec:\n  git_guard: {mode}\n  git_hooks: true\n")
    config = load_global_config(paths)
    assert config.hostexec.git_hooks is True
    assert "git_guard" not in config.hostexec.model_dump()
    assert "git_guard:" not in default_config_text()


def test_project_config(paths: CloisterPaths) -> None:
    write(
        paths.project_config("my-api"),
        """
root: /home/me/repos/my-api
refs: [/home/me/repos/shared-lib]
proxy:
  allow: [{domain: internal-docs.example}]
hostexec:
  auto_approve: [{pattern: "^make test$"}]
""",
    )
    project = load_project_config(paths, "my-api")
    assert project.root == "/home/me/repos/my-api"
    assert project.refs == ("/home/me/repos/shared-lib",)
    assert project.proxy.allow[0].domain == "internal-docs.example"


@pytest.mark.parametrize(
    ("text", "line", "column", "message"),
    [
        # broken YAML: unclosed flow sequence
        ("proxy:\n  allow: [\n    - x\n", 3, 5, "invalid YAML"),
        # bad indentation
        ("proxy:\n  allow:\n  - domain: a.com\n   deny: []\n", 4, 8, "invalid YAML"),
        # duplicate key
        ("proxy:\n  allowed_ports: [80]\n  allowed_ports: [443]\n", 3, 3, "invalid YAML"),
        # tab indentation
        ("proxy:\n\tallow: []\n", 2, 1, "invalid YAML"),
    ],
)
def test_broken_yaml_names_file_and_line(
    paths: CloisterPaths, text: str, line: int, column: int, message: str
) -> None:
    write(paths.config_file, text)
    with pytest.raises(ConfigError) as caught:
        load_global_config(paths)
    error = caught.value
    assert error.path == paths.config_file
    assert error.line == line
    assert str(error).startswith(f"{paths.config_file}:{line}:")
    assert message in str(error)
    del column  # ruamel's column for these cases is an implementation detail


@pytest.mark.parametrize(
    ("text", "location", "message"),
    [
        ("proxy:\n  alow: []\n", ":2:3:", "unknown key 'alow' in proxy; did you mean 'allow'?"),
        (
            "color: blue\n",
            ":1:1:",
            # (the sections added later follow: only the start is compared)
            "unknown key 'color' (expected one of: proxy, hostexec, defaults, guardian, agents,"
            " devcontainer",
        ),
        (
            "proxy:\n  allow:\n    - domain: a.com\n    - domian: b.com\n",
            ":4:7:",
            "unknown key 'domian' in proxy.allow[1]; did you mean 'domain'?",
        ),
        (
            "proxy:\n  allow:\n    - domain: a.com\n    - domain: bad host\n",
            ":4:15:",
            "proxy.allow[1].domain: host 'bad host' contains a character",
        ),
        (
            "proxy:\n  allow:\n    - {domain: a.com, pattern: '*.a.com'}\n",
            ":3:7:",
            "exactly one of 'domain' or 'pattern'",
        ),
        (
            "proxy:\n  deny:\n    - pattern: a.com\n",
            ":3:16:",
            "must start with '*.'",
        ),
        ("proxy:\n  approval_timeout: soon\n", ":2:21:", "not a duration: 'soon'"),
        ("proxy:\n  allowed_ports: [80, 70000]\n", ":2:23:", "proxy.allowed_ports[1]"),
        (
            "proxy:\n  unlisted_domain_behavior: ask\n",
            ":2:29:",
            "'request_approval' or 'reject'",
        ),
        ("proxy:\n  allow_private_networks: [10.0.0.1/8]\n", ":2:28:", "allow_private_networks[0]"),
        (
            "hostexec:\n  auto_approve:\n    - pattern: '^git ('\n",
            ":3:16:",
            "not a valid RE2 regular expression: '^git (' (missing ): ^git ()",
        ),
        ("- just\n- a list\n", ":1:1:", "expected a mapping"),
        ("proxy: 3\n", ":1:8:", "proxy:"),
    ],
)
def test_invalid_values_name_file_and_line(
    paths: CloisterPaths, text: str, location: str, message: str
) -> None:
    write(paths.config_file, text)
    with pytest.raises(ConfigError) as caught:
        load_global_config(paths)
    rendered = str(caught.value)
    assert rendered.startswith(f"{paths.config_file}{location}"), rendered
    assert message in rendered


@pytest.mark.parametrize(
    ("text", "location", "message"),
    [
        (
            "proxy:\n  allow:\n    - github.com\n",
            ":3:7:",
            "proxy.allow[0]: 'github.com' is a bare string: write `- domain: github.com`",
        ),
        (
            "proxy:\n  deny:\n    - domain: a.test\n    - '**.pastebin.com'\n",
            ":4:7:",
            "proxy.deny[1]: '**.pastebin.com' is a bare string:"
            " write `- pattern: '**.pastebin.com'`",
        ),
        (
            "hostexec:\n  auto_approve:\n    - ^make test$\n",
            ":3:7:",
            "'^make test$' is a bare string: write `- pattern: '^make test$'`",
        ),
        (
            "proxy:\n  allow: github.com\n",
            ":2:10:",
            "proxy.allow: expected a list of rules, got the string 'github.com': write"
            " `- domain: github.com` on its own line below `allow:`",
        ),
        (
            "hostexec:\n  manual_approve: ^gh .+$\n",
            ":2:19:",
            "write `- pattern: '^gh .+$'` on its own line below `manual_approve:`",
        ),
        (
            "proxy:\n  allow:\n    - domain: https://github.com/org/repo\n",
            ":3:15:",
            "proxy.allow[0].domain: domain 'https://github.com/org/repo' is a URL:"
            " write the host name: `github.com`",
        ),
        (
            "proxy:\n  allow:\n    - domain: http://registry.internal:8443/v2\n",
            ":3:15:",
            "is a URL: write the host name: `registry.internal`; ports go in `ports:`"
            " (`ports: [8443]`)",
        ),
        (
            "proxy:\n  allow:\n    - domain: github.com:443\n",
            ":3:15:",
            "domain 'github.com:443' has a port: write the host name: `github.com`;"
            " ports go in `ports:` (`ports: [443]`)",
        ),
        (
            "proxy:\n  allow:\n    - domain: '[::1]:8080'\n",
            ":3:15:",
            "has a port: write the host name: `::1`; ports go in `ports:` (`ports: [8080]`)",
        ),
        (
            "proxy:\n  allow:\n    - domain: github.com:https\n",
            ":3:15:",
            "domain 'github.com:https' has a ':': write the host name: `github.com`",
        ),
        (
            "proxy:\n  allow:\n    - pattern: '*.github.com:443'\n",
            ":3:16:",
            "pattern '*.github.com:443' has a port: write the pattern: `*.github.com`",
        ),
        (
            "proxy:\n  allow:\n    - {domain: a.test, ports: 8443}\n",
            ":3:31:",
            "proxy.allow[0].ports: expected a list of ports, got 8443: write `ports: [8443]`",
        ),
    ],
)
def test_common_mistakes_say_what_to_write(
    paths: CloisterPaths, text: str, location: str, message: str
) -> None:
    write(paths.config_file, text)
    with pytest.raises(ConfigError) as caught:
        load_global_config(paths)
    rendered = str(caught.value)
    assert rendered.startswith(f"{paths.config_file}{location}"), rendered
    assert message in rendered
    assert len(rendered.splitlines()) == 1


def test_ip_literals_are_not_mistaken_for_ports(paths: CloisterPaths) -> None:
    write(paths.config_file, "proxy:\n  allow: [{domain: '::1'}, {domain: '[fd00::1]'}]\n")
    allowed = [entry.domain for entry in load_global_config(paths).proxy.allow]
    assert allowed == ["::1", "fd00::1"]


def test_several_problems_are_all_reported(paths: CloisterPaths) -> None:
    write(paths.config_file, "proxy:\n  alow: []\n  allowed_ports: [0]\nhostexec:\n  timeot: 5s\n")
    with pytest.raises(ConfigError) as caught:
        load_global_config(paths)
    assert [problem.line for problem in caught.value.problems] == [3, 2, 5]
    assert len(str(caught.value).splitlines()) == 3


def test_decision_and_project_files_name_their_own_path(paths: CloisterPaths) -> None:
    path = write(paths.project_decisions("my-api"), "allow:\n  - domian: x.com\n")
    with pytest.raises(ConfigError, match=rf"^{path}:2:5: unknown key 'domian'"):
        load_decision_file(path)
    project = write(paths.project_config("my-api"), "refs: nope\nproxy: {alow: []}\n")
    with pytest.raises(ConfigError) as caught:
        load_project_config(paths, "my-api")
    assert str(caught.value).startswith(f"{project}:")


def test_unreadable_file_is_a_config_error(paths: CloisterPaths) -> None:
    paths.config_file.mkdir(parents=True)
    with pytest.raises(ConfigError, match="cannot read file"):
        load_model(paths.config_file, GlobalConfig)
    write(paths.global_decisions, "").write_bytes(b"\xff\xfe")
    with pytest.raises(ConfigError, match="cannot read file"):
        load_decision_file(paths.global_decisions)


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        (60, 60),
        (1.5, 1.5),
        ("90", 90),
        ("0.5", 0.5),
        ("60s", 60),
        ("5m", 300),
        ("1h30m", 5400),
        ("250ms", 0.25),
        (" 2s ", 2),
    ],
)
def test_parse_duration(value: object, seconds: float) -> None:
    assert parse_duration(value).total_seconds() == seconds


@pytest.mark.parametrize("value", ["", "0", "5x", "s", "1m 2s", "-1s", 0, -3, True, None, "0s"])
def test_parse_duration_refuses(value: object) -> None:
    with pytest.raises(ValueError, match="duration"):
        parse_duration(value)


def test_max_held_per_cloister_defaults_and_bounds() -> None:
    from cloister_core.config.models import GlobalConfig, ProxyConfig

    assert ProxyConfig().max_held_per_cloister == 16
    assert "max_held_per_cloister: 16" in default_config_text()
    assert (
        GlobalConfig.model_validate(
            {"proxy": {"max_held_per_cloister": 3}}
        ).proxy.max_held_per_cloister
        == 3
    )
    for bad in (0, 1001, "many"):
        with pytest.raises(ValueError, match="max_held_per_cloister"):
            GlobalConfig.model_validate({"proxy": {"max_held_per_cloister": bad}})
