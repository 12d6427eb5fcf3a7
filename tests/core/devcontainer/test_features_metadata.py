"""devcontainer-feature.json, options as environment variables, the env file the install sources."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from cloister_core.devcontainer import FeatureError, parse_feature_metadata
from cloister_core.devcontainer.featuremeta import (
    OptionSpec,
    option_environment,
    option_problems,
    render_feature_env,
    safe_name,
)

WHERE = "ghcr.io/x/y:1 devcontainer-feature.json"

# The node Feature's metadata, shortened (devcontainers/features, MIT).
NODE = """{
    // comments are allowed, as in devcontainer.json
    "id": "node",
    "version": "1.6.1",
    "name": "Node.js (via nvm), yarn and pnpm",
    "options": {
        "version": {"type": "string", "proposals": ["lts", "latest", "none"], "default": "lts"},
        "nodeGypDependencies": {"type": "boolean", "default": true},
        "nvmInstallPath": {"type": "string", "default": "/usr/local/share/nvm"},
        "pnpmVersion": {"type": "string", "enum": ["latest", "none"], "default": "latest"},
        "installYarnUsingApt": {"type": "boolean", "default": true},
    },
    "containerEnv": {
        "NVM_DIR": "/usr/local/share/nvm",
        "PATH": "/usr/local/share/nvm/current/bin:${PATH}"
    },
    "installsAfter": ["ghcr.io/devcontainers/features/common-utils"],
    "legacyIds": ["nodejs"],
    "customizations": {"vscode": {"extensions": ["dbaeumer.vscode-eslint"]}}
}
"""


def test_parse_a_real_feature() -> None:
    metadata = parse_feature_metadata(NODE, WHERE)
    assert (metadata.id, metadata.version) == ("node", "1.6.1")
    assert metadata.options["version"] == OptionSpec(
        "string", "lts", ("lts", "latest", "none"), None, None
    )
    assert metadata.options["nodeGypDependencies"].default is True
    assert metadata.options["pnpmVersion"].enum == ("latest", "none")
    assert metadata.installs_after == ("ghcr.io/devcontainers/features/common-utils",)
    assert metadata.legacy_ids == ("nodejs",)
    assert metadata.container_env["PATH"] == "/usr/local/share/nvm/current/bin:${PATH}"
    assert (metadata.privileged, metadata.init, metadata.entrypoint) == (None, None, None)
    assert metadata.cap_add == metadata.security_opt == metadata.mounts == ()
    assert "customizations" in metadata.raw


def test_parse_requests_and_dependencies() -> None:
    text = json.dumps(
        {
            "id": "docker-in-docker",
            "privileged": True,
            "init": True,
            "capAdd": ["SYS_ADMIN"],
            "securityOpt": ["seccomp=unconfined"],
            "entrypoint": "/usr/local/share/docker-init.sh",
            "mounts": [{"source": "dind-${devcontainerId}", "target": "/var/lib/docker"}],
            "dependsOn": {
                "ghcr.io/devcontainers/features/common-utils:2": {"installZsh": False},
                "ghcr.io/x/y:1": "1.2",
                "ghcr.io/x/z:1": True,
            },
        }
    )
    metadata = parse_feature_metadata(text, WHERE)
    assert metadata.privileged is True
    assert metadata.cap_add == ("SYS_ADMIN",)
    assert metadata.entrypoint == "/usr/local/share/docker-init.sh"
    assert len(metadata.mounts) == 1
    assert metadata.depends_on == {
        "ghcr.io/devcontainers/features/common-utils:2": {"installZsh": False},
        "ghcr.io/x/y:1": {"version": "1.2"},
        "ghcr.io/x/z:1": {},
    }


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("", ":1:1: the file is empty"),
        ("[]", ":1:1: expected a JSON object at the top"),
        ('{"version": "1"}', ": id: expected the Feature's id"),
        ('{"id": "x",\n  "id": "y"}', ":2:3: key 'id' is given twice"),
        (
            '{"id": "x",\n "options": {"a": {"type": "number"}}}',
            ':2:20: options.a.type: expected "boolean"',
        ),
        (
            '{"id": "x",\n "options": {"a": {"type": "boolean", "default": "yes"}}}',
            ":2:39: options.a.default: expected a boolean",
        ),
        ('{"id": "x",\n "capAdd": "SYS_ADMIN"}', ":2:2: capAdd: expected a list of strings"),
        ('{"id": "x",\n "privileged": "yes"}', ":2:2: privileged: expected true or false"),
        ('{"id": "x",\n "mounts": [1]}', ":2:13: mounts[0]: expected a mount string or object"),
        ('{"id": "x",\n "containerEnv": {"A": 1}}', ":2:19: containerEnv.A: expected a string"),
        (
            '{"id": "x",\n "dependsOn": {"ghcr.io/a/b": [1]}}',
            ":2:16: dependsOn['ghcr.io/a/b']: expected an object",
        ),
        ('{"id": "x\\u0000"}', "a NUL character"),
        ('{"id": "x", "name": ' + "[" * 100 + "]" * 100 + "}", "nested"),
    ],
)
def test_errors_name_the_feature_and_the_line(text: str, error: str) -> None:
    with pytest.raises(FeatureError) as caught:
        parse_feature_metadata(text, WHERE)
    assert str(caught.value).startswith(WHERE)
    assert error in str(caught.value)


def test_oversized_metadata_is_refused() -> None:
    with pytest.raises(FeatureError, match="over 1048576 bytes"):
        parse_feature_metadata('{"id": "x", "name": "' + "a" * (1024 * 1024) + '"}', WHERE)


# From the devcontainers CLI's featureHelpers tests of getSafeId (MIT).
@pytest.mark.parametrize(
    ("name", "safe"),
    [
        ("option-name", "OPTION_NAME"),
        ("option1-name-with_dashes-", "OPTION1_NAME_WITH_DASHES_"),
        ("myOptionName", "MYOPTIONNAME"),
        ("1name", "_NAME"),
        ("12345_option-name", "_OPTION_NAME"),
        ("__private", "_PRIVATE"),
        ("opt.with spaces", "OPT_WITH_SPACES"),
        ("ünïcode", "_N_CODE"),  # only ASCII letters and digits survive
    ],
)
def test_safe_names(name: str, safe: str) -> None:
    assert safe_name(name) == safe


def test_option_environment_defaults_then_chosen() -> None:
    metadata = parse_feature_metadata(NODE, WHERE)
    environment = option_environment(
        metadata, {"version": "18", "installYarnUsingApt": False, "extra-thing": "x"}
    )
    assert environment == {
        "VERSION": "18",
        "NODEGYPDEPENDENCIES": "true",
        "NVMINSTALLPATH": "/usr/local/share/nvm",
        "PNPMVERSION": "latest",
        "INSTALLYARNUSINGAPT": "false",
        "EXTRA_THING": "x",  # not declared: passed anyway, as the CLI does
    }


def test_an_option_without_default_is_left_out() -> None:
    metadata = parse_feature_metadata('{"id": "x", "options": {"a": {"type": "string"}}}', WHERE)
    assert option_environment(metadata, {}) == {}
    assert option_environment(metadata, {"a": "1"}) == {"A": "1"}


def test_option_problems_are_warnings_only() -> None:
    metadata = parse_feature_metadata(NODE, WHERE)
    chosen = {"pnpmVersion": "8", "nodeGypDependencies": "yes", "unknown": "1", "": "x"}
    problems = option_problems(metadata, chosen)
    assert len(problems) == 4
    assert "'8' is not one of 'latest', 'none'" in problems[0]
    assert "is a boolean" in problems[1]
    assert "not one the Feature declares" in problems[2]
    assert "no environment variable name" in problems[3]
    assert option_environment(metadata, chosen)["PNPMVERSION"] == "8"  # installed anyway
    assert "" not in option_environment(metadata, chosen)


HOSTILE = [
    "it's",
    '"double"',
    "$(touch {marker})",
    "`touch {marker}`",
    "${{HOME}}",
    "line one\nline two",
    "carriage\rreturn",
    "back\\slash",
    "; touch {marker}",
    "",
    "   spaces   ",
]


def test_the_env_file_keeps_hostile_values_as_text(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    values = [value.format(marker=marker) for value in HOSTILE]
    options = {f"opt{index}": {"type": "string", "default": ""} for index in range(len(values))}
    metadata = parse_feature_metadata(json.dumps({"id": "x", "options": options}), WHERE)
    chosen: dict[str, str | bool] = {f"opt{index}": value for index, value in enumerate(values)}
    env_file = tmp_path / "devcontainer-features.env"
    env_file.write_text(
        render_feature_env(
            metadata,
            chosen,
            remote_user="vscode'; touch " + str(marker),
            container_user="root",
            remote_user_home="/home/vscode",
        )
    )
    # Sourced as the install step does: `set -a`, then `.`; the result printed NUL-separated.
    script = 'set -a; . "$1"; set +a; for n in "$@"; do printf "%s\\0" "$n"; done'
    names = ["_REMOTE_USER", "_CONTAINER_USER", "_REMOTE_USER_HOME"]
    names += [f"OPT{index}" for index in range(len(values))]
    printed = subprocess.run(
        [
            "/bin/sh",
            "-c",
            script.replace('"$@"', " ".join(f'"${name}"' for name in names)),
            "sh",
            str(env_file),
        ],
        check=True,
        capture_output=True,
        env={"PATH": "/usr/bin:/bin"},
    ).stdout.decode()
    assert printed.split("\0")[:-1] == [
        "vscode'; touch " + str(marker),
        "root",
        "/home/vscode",
        *values,
    ]
    assert not marker.exists()


def test_render_refuses_what_sh_cannot_hold() -> None:
    metadata = parse_feature_metadata('{"id": "x"}', WHERE)
    with pytest.raises(ValueError, match="NUL"):
        render_feature_env(metadata, {"a": "x\0y"}, remote_user="a", container_user="b")
