"""The environment of an approved command: chosen names of the host's, nothing else."""

from __future__ import annotations

from pathlib import Path

import pytest

from cloister_core.tokens import TokenRecord
from cloister_executor.environment import BASELINE, DEFAULT_PATH, command_environment

RECORD = TokenRecord.create(cloister="my-api-feature", project="my-api", path=Path("/w/api"))
HOST = {
    "PATH": "/opt/bin:/usr/bin",
    "HOME": "/home/me",
    "USER": "me",
    "LOGNAME": "me",
    "LANG": "en_US.UTF-8",
    "LC_ALL": "C.UTF-8",
    "LC_TIME": "de_DE.UTF-8",
    "AWS_SECRET_ACCESS_KEY": "aws-secret",
    "GITHUB_TOKEN": "ghp_secret",
    "SSH_AUTH_SOCK": "/tmp/agent.sock",
    "DOCKER_HOST": "unix:///var/run/docker.sock",
    "KUBECONFIG": "/home/me/.kube/config",
    "SHELL": "/bin/bash",
    "PWD": "/home/me",
    "LD_PRELOAD": "/evil.so",
    "CLOISTER_CLOISTER": "spoofed",
    "CLOISTER_PROJECT": "spoofed",
}
CLOISTER_VARS = {"CLOISTER_CLOISTER": "my-api-feature", "CLOISTER_PROJECT": "my-api"}


def test_baseline_and_locale_are_kept_everything_else_dropped() -> None:
    env = command_environment(HOST, (), RECORD)
    assert env == {
        "PATH": "/opt/bin:/usr/bin",
        "HOME": "/home/me",
        "USER": "me",
        "LOGNAME": "me",
        "LANG": "en_US.UTF-8",
        "LC_ALL": "C.UTF-8",
        "LC_TIME": "de_DE.UTF-8",
        **CLOISTER_VARS,
    }
    assert set(BASELINE) == {"PATH", "HOME", "USER", "LOGNAME", "LANG"}


@pytest.mark.parametrize(
    ("passthrough", "added"),
    [
        ((), {}),
        (("DOCKER_HOST",), {"DOCKER_HOST": "unix:///var/run/docker.sock"}),
        (
            ["SSH_AUTH_SOCK", "KUBECONFIG"],
            {"SSH_AUTH_SOCK": "/tmp/agent.sock", "KUBECONFIG": "/home/me/.kube/config"},
        ),
        (("NOT_ON_THE_HOST",), {}),  # a listed name the host does not have stays absent
        (("DOCKER_HOST", "DOCKER_HOST"), {"DOCKER_HOST": "unix:///var/run/docker.sock"}),
    ],
)
def test_passthrough_names_are_kept(passthrough: tuple[str, ...], added: dict[str, str]) -> None:
    env = command_environment(HOST, passthrough, RECORD)
    baseline = command_environment(HOST, (), RECORD)
    assert env == baseline | added


@pytest.mark.parametrize(
    "name",
    ["AWS_SECRET_ACCESS_KEY", "GITHUB_TOKEN", "SSH_AUTH_SOCK", "LD_PRELOAD", "SHELL", "PWD"],
)
def test_unlisted_host_variables_are_dropped(name: str) -> None:
    assert name not in command_environment(HOST, (), RECORD)


def test_names_are_matched_exactly() -> None:
    host = {"PATHX": "1", "path": "2", "XLC_ALL": "3", "lc_all": "4", "HOME_DIR": "5"}
    assert command_environment(host, ("docker_host",), RECORD) == {
        "PATH": DEFAULT_PATH,
        **CLOISTER_VARS,
    }


@pytest.mark.parametrize(
    ("host", "path"),
    [
        ({}, DEFAULT_PATH),
        ({"HOME": "/h"}, DEFAULT_PATH),
        ({"PATH": "/only/here"}, "/only/here"),
    ],
)
def test_path_defaults_when_absent(host: dict[str, str], path: str) -> None:
    assert command_environment(host, (), RECORD)["PATH"] == path


def test_cloister_variables_come_from_the_record_not_the_host() -> None:
    # Neither the host nor a pass-through list can override which cloister asked.
    env = command_environment(HOST, ("CLOISTER_CLOISTER", "CLOISTER_PROJECT"), RECORD)
    assert {name: env[name] for name in CLOISTER_VARS} == CLOISTER_VARS


def test_token_and_path_are_not_in_the_environment() -> None:
    env = command_environment(HOST, (), RECORD)
    assert RECORD.secret not in "".join(f"{name}={value}" for name, value in env.items())
    assert "/w/api" not in env.values()


def test_host_mapping_is_not_modified() -> None:
    host = dict(HOST)
    command_environment(host, ("GITHUB_TOKEN",), RECORD)
    assert host == HOST
