"""The registry of agents, and what every agent module must get right."""

from __future__ import annotations

from pathlib import Path

import pytest

from cloister_cli.agents import AGENTS, Agent, get
from cloister_cli.agents.base import HomeFile
from cloister_core.credentials import GATEWAY_METHODS, METHODS, PROVIDERS, Method
from cloister_core.errors import CloisterError

EVERY = [pytest.param(agent, id=name) for name, agent in AGENTS.items()]
GATEWAY = "http://cloister-guardian-credentials:9997"
TOKEN = "cloister-token-0123456789"


def test_the_agents_are_the_providers() -> None:
    assert set(AGENTS) == set(PROVIDERS)


def test_get() -> None:
    assert get("claude") is AGENTS["claude"]


@pytest.mark.parametrize(("typo", "hint"), [("claud", "'claude'"), ("gemeni", "'gemini'")])
def test_get_suggests_the_closest_name(typo: str, hint: str) -> None:
    with pytest.raises(CloisterError, match=f"no such agent '{typo}' \\(did you mean {hint}\\?\\)"):
        get(typo)


def test_get_lists_the_agents_when_nothing_is_close() -> None:
    with pytest.raises(
        CloisterError, match="no such agent 'vim' \\(one of claude, codex, gemini\\)"
    ):
        get("vim")


@pytest.mark.parametrize("agent", EVERY)
def test_descriptions(agent: Agent) -> None:
    assert agent.title
    assert agent.version_argv[0] == agent.command
    assert agent.argv(skip_permissions=False) == [agent.command]
    assert agent.argv(skip_permissions=True)[0] == agent.command
    assert agent.state_dir.startswith(".")
    assert "/" not in agent.state_dir
    HomeFile(agent.rules_file, b"")  # a valid path in the state directory
    assert set(agent.method_help) <= set(METHODS)
    assert all(len(text) > 40 for text in agent.method_help.values())


@pytest.mark.parametrize("agent", EVERY)
@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("skip_permissions", [True, False])
def test_generated_holds_the_rules(agent: Agent, method: Method, skip_permissions: bool) -> None:
    files = agent.generated(
        method=method,
        skip_permissions=skip_permissions,
        rules="the rules",
        gateway_url=GATEWAY + PROVIDERS[agent.name].prefix,
    )
    rules = [item for item in files if item.path == agent.rules_file]
    assert [item.content for item in rules] == [b"the rules"]
    assert len({item.path for item in files}) == len(files)


@pytest.mark.parametrize("agent", EVERY)
@pytest.mark.parametrize("method", GATEWAY_METHODS)
def test_every_variable_carrying_the_gateway_or_token_is_reserved(
    agent: Agent, method: Method
) -> None:
    env = agent.environment(
        home="/home/cloister",
        gateway_url=GATEWAY + PROVIDERS[agent.name].prefix,
        token=TOKEN,
        method=method,
        skip_permissions=True,
        extra={},
    )
    carrying = {name for name, value in env.items() if TOKEN in value or GATEWAY in value}
    assert carrying
    assert carrying <= agent.reserved_env
    home_variables = {name for name, value in env.items() if value.startswith("/home/cloister")}
    assert home_variables <= agent.reserved_env


@pytest.mark.parametrize("agent", EVERY)
def test_the_state_directory_is_in_the_home(agent: Agent) -> None:
    assert agent.config_dir("/home/cloister") == f"/home/cloister/{agent.state_dir}"


@pytest.mark.parametrize("agent", EVERY)
def test_existing_login_from_an_empty_home_says_what_to_do(agent: Agent, tmp_path: Path) -> None:
    with pytest.raises(CloisterError, match="on this machine first"):
        agent.home_files(
            host_home=tmp_path,
            method="existing-login",
            skip_permissions=True,
            rules="r",
            gateway_url=GATEWAY,
        )


@pytest.mark.parametrize("agent", EVERY)
def test_login_paths_are_where_the_login_files_go(agent: Agent, host_home: Path) -> None:
    assert {item.path for item in agent.login_files(host_home)} <= set(agent.login_paths)
    assert agent.login_paths
