"""The agents' own background hosts: each agent's list, and the config that replaces it."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from cloister_core.background import BACKGROUND_HOSTS, background_hosts, overridden
from cloister_core.config.models import AgentsConfig
from cloister_core.credentials import PROVIDERS
from cloister_core.hosts import normalize_host


def test_every_agent_has_a_list_of_normalised_host_names() -> None:
    assert set(BACKGROUND_HOSTS) == set(PROVIDERS)
    for hosts in BACKGROUND_HOSTS.values():
        assert hosts
        assert all(normalize_host(host).name == host for host in hosts)


def test_the_agents_own_list_by_default() -> None:
    agents = AgentsConfig()
    assert background_hosts("claude", agents) == ("downloads.claude.ai",)
    assert background_hosts("codex", agents) == ("ab.chatgpt.com", "github.com")
    assert background_hosts("gemini", agents) == ("play.googleapis.com",)
    assert not overridden("codex", agents)


def test_no_agent_or_an_unknown_one_has_none() -> None:
    assert background_hosts(None, AgentsConfig()) == ()
    assert background_hosts("aider", AgentsConfig()) == ()
    assert not overridden("aider", AgentsConfig())


def test_the_config_replaces_the_list() -> None:
    agents = AgentsConfig.model_validate(
        {
            "codex": {"background_hosts": ["Telemetry.Example.", "telemetry.example", "b.test"]},
            "gemini": {"background_hosts": []},
        }
    )
    assert background_hosts("codex", agents) == ("telemetry.example", "b.test")
    assert background_hosts("gemini", agents) == ()
    assert background_hosts("claude", agents) == ("downloads.claude.ai",)
    assert (overridden("codex", agents), overridden("gemini", agents)) == (True, True)
    assert not overridden("claude", agents)


@pytest.mark.parametrize("entry", ["https://github.com/", "github.com/x", "*.github.com", ""])
def test_the_config_takes_host_names_only(entry: str) -> None:
    with pytest.raises(ValidationError, match="background_hosts lists host names only"):
        AgentsConfig.model_validate({"codex": {"background_hosts": [entry]}})
