"""Compose-based devcontainer.json files: the official templates, merging, interpolation,
the cloister's service and the services started beside it."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from cloister_core.devcontainer import (
    ComposeService,
    Devcontainer,
    DevcontainerError,
    ImageSource,
    MountSpec,
    Override,
    load_devcontainer,
)
from tests.core.devcontainer.conftest import Workspace

FIXTURES = Path(__file__).parent / "fixtures" / "compose"


def template(workspace: Workspace, name: str) -> Devcontainer:
    """Load the official template *name* copied into the workspace's project."""
    shutil.copytree(FIXTURES / name, workspace.project, dirs_exist_ok=True)
    return load_devcontainer(
        workspace.project / ".devcontainer" / "devcontainer.json",
        project_root=workspace.project,
        home=workspace.home,
        environ=workspace.environ,
    )


def compose(
    workspace: Workspace,
    text: str,
    *,
    devcontainer: str = '{"dockerComposeFile": "compose.yml", "service": "app"}',
    files: dict[str, str] | None = None,
) -> Devcontainer:
    """Load a devcontainer.json using .devcontainer/compose.yml = *text*."""
    workspace.write(text, ".devcontainer/compose.yml")
    workspace.write("FROM debian:bookworm-slim\n", ".devcontainer/Dockerfile")
    for relative, content in (files or {}).items():
        workspace.write(content, relative)
    return workspace.load(devcontainer)


def override(devcontainer: Devcontainer, field: str) -> Override:
    found = [item for item in devcontainer.overrides if item.field.endswith(" " + field)]
    assert len(found) == 1, [item.field for item in devcontainer.overrides]
    return found[0]


def service(devcontainer: Devcontainer, name: str) -> ComposeService:
    return next(item for item in devcontainer.services if item.name == name)


APP = """\
services:
  app:
    build: {context: ., dockerfile: Dockerfile}
"""

# --- the official templates ---------------------------------------------------------------


def test_postgres_template_builds_the_app_and_runs_the_database_in_its_namespace(
    workspace: Workspace,
) -> None:
    loaded = template(workspace, "postgres")
    compose_file = workspace.project / ".devcontainer" / "docker-compose.yml"
    assert loaded.source == ImageSource(
        kind="build",
        dockerfile=(workspace.project / ".devcontainer" / "Dockerfile").resolve(),
        context=workspace.project.resolve(),
    )
    assert loaded.compose_files == (compose_file.resolve(),)
    assert loaded.mounts == ()  # ../..:/workspaces: Cloister mounts the project itself
    [db] = loaded.services
    assert db.name == "db"
    assert db.source == ImageSource(kind="image", image="postgres:latest")
    assert db.environment == {
        "POSTGRES_USER": "postgres",
        "POSTGRES_DB": "postgres",
        "POSTGRES_PASSWORD": "postgres",
    }
    assert db.mounts == (MountSpec("volume", "postgres-data", "/var/lib/postgresql", False),)
    assert db.shares_cloister_network
    assert db.command is None
    assert db.ports == ()
    workspace_bind = override(loaded, "services.app.volumes[0]")
    assert (workspace_bind.outcome, workspace_bind.why) == (
        "dropped",
        "Cloister mounts the project itself at /work",
    )
    assert workspace_bind.file == compose_file.resolve()
    assert workspace_bind.line == 10
    assert workspace_bind.render(loaded.path).startswith(f"{compose_file.resolve()}:10: ")
    network = override(loaded, "services.app.network_mode")
    assert network.outcome == "kept"
    assert network.why.startswith("db joins the cloister's network namespace")
    assert override(loaded, "services.app.command").outcome == "ignored"
    assert override(loaded, "services.db.restart").outcome == "ignored"
    assert set(loaded.input_files()) == {
        loaded.path,
        (workspace.project / ".devcontainer" / "Dockerfile").resolve(),
        compose_file.resolve(),
    }


def test_rails_template_keeps_the_healthcheck_the_dependency_and_the_init_script(
    workspace: Workspace,
) -> None:
    loaded = template(workspace, "ruby-rails-postgres")
    assert loaded.container_env == {
        "DATABASE_URL": "postgresql://postgres:postgres@db:5432/postgres"
    }
    db = service(loaded, "db")
    assert db.healthcheck == {
        "test": ["CMD-SHELL", "pg_isready -U postgres"],
        "interval": 10_000_000_000,
        "timeout": 5_000_000_000,
        "retries": 5,
        "start_period": 30_000_000_000,
    }
    script = (workspace.project / ".devcontainer" / "create-db-user.sql").resolve()
    assert db.mounts == (
        MountSpec("volume", "postgres-data", "/var/lib/postgresql", False),
        MountSpec("bind", str(script), "/docker-entrypoint-initdb.d/create-db-user.sql", True),
    )
    assert not db.shares_cloister_network
    assert override(loaded, "services.app.depends_on").why == (
        "db start with the cloister, before its commands"
    )
    assert override(loaded, "services.db.networks").outcome == "ignored"
    assert override(loaded, "networks").outcome == "ignored"
    bind = override(loaded, "services.db.volumes[1]")
    assert (bind.outcome, bind.why) == (
        "kept",
        "made read-only: a cloister writes only its project",
    )


def test_env_file_and_dotenv_are_read_and_are_inputs(workspace: Workspace) -> None:
    loaded = template(workspace, "rust-postgres")
    expected = {
        "POSTGRES_USER": "postgres",
        "POSTGRES_PASSWORD": "postgres",
        "POSTGRES_DB": "postgres",
        "POSTGRES_HOSTNAME": "localhost",
        "POSTGRES_PORT": "5432",
    }
    assert loaded.container_env == expected
    assert service(loaded, "db").environment == expected
    assert (workspace.project / ".devcontainer" / ".env").resolve() in loaded.input_files()


def test_docker_outside_of_docker_template_has_its_socket_refused(workspace: Workspace) -> None:
    loaded = template(workspace, "docker-outside-of-docker-compose")
    socket = override(loaded, "services.app.volumes[0]")
    assert socket.outcome == "refused"
    assert "Docker socket" in socket.why
    assert loaded.mounts == ()
    assert override(loaded, "services.app.entrypoint").outcome == "ignored"
    assert loaded.services == ()


def test_existing_compose_template_merges_the_project_file_with_the_override(
    workspace: Workspace,
) -> None:
    (workspace.project / "Dockerfile").write_text("FROM debian:bookworm-slim\n")
    (workspace.project / "docker-compose.yml").write_text(
        "services:\n"
        "  your-service-name-here:\n"
        "    build: .\n"
        "    ports: ['8000:8000']\n"
        "    environment: [MODE=production, DEBUG=0]\n"
        "  cache:\n"
        "    image: redis:7\n"
    )
    loaded = template(workspace, "docker-existing-docker-compose")
    root_file = (workspace.project / "docker-compose.yml").resolve()
    assert loaded.compose_files == (
        root_file,
        (workspace.project / ".devcontainer" / "docker-compose.yml").resolve(),
    )
    assert loaded.source.dockerfile == (workspace.project / "Dockerfile").resolve()
    assert loaded.container_env == {"MODE": "production", "DEBUG": "0"}
    # Paths of every file resolve against the first file's folder: `..` is the parent.
    assert override(loaded, "services.your-service-name-here.volumes[0]").why == (
        "Cloister mounts the project itself at /work"
    )
    assert override(loaded, "services.your-service-name-here.ports").file == root_file
    assert [item.name for item in loaded.services] == ["cache"]


# --- the devcontainer.json keys -----------------------------------------------------------


def test_service_is_required_and_must_exist(workspace: Workspace) -> None:
    with pytest.raises(DevcontainerError, match="`service` is missing") as missing:
        compose(workspace, APP, devcontainer='{\n"dockerComposeFile": "compose.yml"\n}')
    assert missing.value.line == 2
    with pytest.raises(DevcontainerError, match=r"'web' is not a service .*\(app\)") as unknown:
        compose(
            workspace,
            APP,
            devcontainer='{\n"dockerComposeFile": "compose.yml",\n"service": "web"\n}',
        )
    assert unknown.value.line == 3


def test_run_services_chooses_the_services_and_their_dependencies(workspace: Workspace) -> None:
    text = APP + (
        "  db: {image: 'postgres:16'}\n"
        "  cache: {image: 'redis:7', depends_on: [db]}\n"
        "  docs: {image: 'nginx'}\n"
    )
    devcontainer = (
        '{"dockerComposeFile": ["compose.yml"], "service": "app", "runServices": ["cache"]}'
    )
    loaded = compose(workspace, text, devcontainer=devcontainer)
    assert [item.name for item in loaded.services] == ["db", "cache"]
    assert service(loaded, "cache").depends_on == ("db",)
    docs = override(loaded, "services.docs")
    assert (docs.outcome, docs.line) == ("ignored", 6)
    with pytest.raises(DevcontainerError, match=r"runServices\[0\]: 'nope' is not a service"):
        compose(
            workspace,
            text,
            devcontainer='{"dockerComposeFile": "compose.yml", "service": "app",'
            ' "runServices": ["nope"]}',
        )


def test_a_compose_file_outside_the_project_or_missing_is_an_error(workspace: Workspace) -> None:
    (workspace.home / "compose.yml").write_text(APP)
    with pytest.raises(DevcontainerError, match="outside the project"):
        workspace.load('{"dockerComposeFile": "../../../compose.yml", "service": "app"}')
    with pytest.raises(DevcontainerError, match="no such file") as missing:
        workspace.load('{\n  "dockerComposeFile": ["../gone.yml"],\n  "service": "app"\n}')
    assert str(missing.value).startswith(f"{workspace.project}/.devcontainer/devcontainer.json:2:")
    assert "dockerComposeFile[0]" in str(missing.value)
    (workspace.project / ".devcontainer" / "link.yml").symlink_to(workspace.home / "compose.yml")
    with pytest.raises(DevcontainerError, match="outside the project"):
        workspace.load('{"dockerComposeFile": "link.yml", "service": "app"}')


def test_without_compose_the_compose_keys_are_ignored(workspace: Workspace) -> None:
    loaded = workspace.load('{"image": "debian", "service": "app", "runServices": []}')
    assert loaded.services == ()
    assert [(item.field, item.outcome) for item in loaded.overrides[1:]] == [
        ("service", "ignored"),
        ("runServices", "ignored"),
    ]


def test_image_keys_of_devcontainer_json_are_ignored_with_compose(workspace: Workspace) -> None:
    loaded = compose(
        workspace,
        APP,
        devcontainer='{"dockerComposeFile": "compose.yml", "service": "app", "image": "x"}',
    )
    image = next(item for item in loaded.overrides if item.field == "image")
    assert (image.outcome, image.why) == ("ignored", "the compose service's image is used")


def test_devcontainer_json_settings_apply_over_the_service(workspace: Workspace) -> None:
    text = APP + (
        "    environment: {A: from-compose, B: from-compose}\n"
        "    user: vscode\n"
        "    volumes: [cache:/home/vscode/.cache]\n"
        "volumes: {cache: {}}\n"
    )
    devcontainer = (
        '{"dockerComposeFile": "compose.yml", "service": "app", "containerEnv": {"B": "json"},'
        ' "mounts": ["type=tmpfs,target=/scratch"]}'
    )
    loaded = compose(workspace, text, devcontainer=devcontainer)
    assert loaded.container_env == {"A": "from-compose", "B": "json"}
    assert loaded.user == "vscode"
    assert [mount.target for mount in loaded.mounts] == ["/home/vscode/.cache", "/scratch"]
    devcontainer = '{"dockerComposeFile": "compose.yml", "service": "app", "remoteUser": "dev"}'
    loaded = compose(workspace, text, devcontainer=devcontainer)
    assert loaded.user == "dev"
    assert override(loaded, "services.app.user").why == "'dev' of devcontainer.json is used"


def test_root_user_of_the_cloister_service_is_ignored(workspace: Workspace) -> None:
    loaded = compose(workspace, APP + "    user: root\n")
    assert loaded.user is None
    assert override(loaded, "services.app.user").outcome == "ignored"


# --- merging and interpolation ------------------------------------------------------------


def test_later_files_override_scalars_and_merge_by_name_and_target(workspace: Workspace) -> None:
    workspace.write(
        "services:\n"
        "  app:\n"
        "    environment: {KEEP: '1', CHANGE: old}\n"
        "    volumes: ['data:/data', 'logs:/logs']\n"
        "  db:\n"
        "    image: postgres:15\n"
        "    command: [postgres, -c, fsync=off]\n"
        "    expose: ['5432']\n"
        "volumes: {data: {}, logs: {}, more: {}}\n",
        ".devcontainer/override.yml",
    )
    text = APP + (
        "    environment: [CHANGE=new, ADDED=yes]\n"
        "    volumes: ['more:/data']\n"
        "  db:\n"
        "    image: postgres:16\n"
        "    command: postgres -c 'max_connections=10'\n"
        "    expose: ['5433']\n"
    )
    devcontainer = '{"dockerComposeFile": ["override.yml", "compose.yml"], "service": "app"}'
    loaded = compose(workspace, text, devcontainer=devcontainer)
    assert loaded.container_env == {"KEEP": "1", "CHANGE": "new", "ADDED": "yes"}
    assert [(mount.source, mount.target) for mount in loaded.mounts] == [
        ("more", "/data"),
        ("logs", "/logs"),
    ]
    db = service(loaded, "db")
    assert db.source.image == "postgres:16"
    assert db.command == ("postgres", "-c", "max_connections=10")
    assert db.ports == (5432, 5433)


def test_interpolation_reads_dotenv_and_allowed_host_variables(workspace: Workspace) -> None:
    text = APP + (
        "  db:\n"
        "    image: postgres:${PG_VERSION:-16}\n"
        "    environment:\n"
        "      USER_NAME: $USER\n"
        "      DB: ${DB_NAME}\n"
        "      MISSING: ${NOT_SET-fallback}\n"
        "      EMPTY: '${NOT_SET:+never}'\n"
        "      PRICE: $$5\n"
        "      NESTED: ${NOT_SET:-${DB_NAME}-test}\n"
    )
    loaded = compose(
        workspace, text, files={".devcontainer/.env": "DB_NAME=shop\nPG_VERSION='15'\n"}
    )
    db = service(loaded, "db")
    assert db.source.image == "postgres:15"
    assert db.environment == {
        "USER_NAME": "dev",
        "DB": "shop",
        "MISSING": "fallback",
        "EMPTY": "",
        "PRICE": "$5",
        "NESTED": "shop-test",
    }


def test_interpolating_a_secret_looking_host_variable_is_refused(workspace: Workspace) -> None:
    text = APP + (
        "    environment:\n"
        "      TOKEN: ${GITHUB_TOKEN}\n"
        "      SAFE: ${HOME}\n"
        "  db:\n"
        "    image: postgres\n"
        "    environment: [GITHUB_TOKEN, 'SSH_AUTH_SOCK=${SSH_AUTH_SOCK:-none}']\n"
    )
    loaded = compose(workspace, text)
    assert "ghp_" not in repr(loaded)
    assert loaded.container_env == {"SAFE": str(workspace.home)}
    token = override(loaded, "services.app.environment.TOKEN")
    assert token.outcome == "refused"
    assert "${GITHUB_TOKEN}" in token.why
    assert service(loaded, "db").environment == {}
    assert override(loaded, "services.db.environment.GITHUB_TOKEN").outcome == "refused"
    assert override(loaded, "services.db.environment.SSH_AUTH_SOCK").outcome == "refused"


def test_a_secret_looking_name_may_come_from_the_projects_dotenv(workspace: Workspace) -> None:
    text = APP + "    environment: {PASSWORD: '${DB_PASSWORD}'}\n"
    loaded = compose(workspace, text, files={".devcontainer/.env": "DB_PASSWORD=postgres\n"})
    assert loaded.container_env == {"PASSWORD": "postgres"}


def test_required_variable_and_bad_interpolation_are_errors_at_their_line(
    workspace: Workspace,
) -> None:
    with pytest.raises(DevcontainerError, match="required variable NOPE") as required:
        compose(workspace, APP + "    environment: {A: '${NOPE:?set it}'}\n")
    assert required.value.line == 4
    with pytest.raises(DevcontainerError, match="invalid interpolation format"):
        compose(workspace, APP + "    environment: {A: '${-x}'}\n")


# --- the cloister's service ---------------------------------------------------------------


def test_the_cloister_service_gets_no_privileges_namespaces_or_ports(
    workspace: Workspace,
) -> None:
    text = APP + (
        "    privileged: true\n"
        "    cap_add: [SYS_PTRACE]\n"
        "    security_opt: ['seccomp:unconfined']\n"
        "    devices: ['/dev/kvm:/dev/kvm']\n"
        "    pid: host\n"
        "    ipc: host\n"
        "    userns_mode: host\n"
        "    cgroup_parent: /\n"
        "    ports: ['127.0.0.1:3000:3000']\n"
        "    expose: ['3000']\n"
        "    extra_hosts: ['host.docker.internal:host-gateway']\n"
        "    healthcheck: {test: [CMD, 'true']}\n"
        "    restart: always\n"
        "    container_name: mine\n"
        "    init: true\n"
        "    tty: true\n"
        "    stdin_open: true\n"
        "    labels: {a: b}\n"
        "    working_dir: /src\n"
    )
    loaded = compose(workspace, text)
    expected = {
        "privileged": "dropped",
        "cap_add[0]": "dropped",
        "security_opt[0]": "dropped",
        "devices": "dropped",
        "pid": "dropped",
        "ipc": "dropped",
        "userns_mode": "dropped",
        "cgroup_parent": "dropped",
        "ports": "ignored",
        "expose": "ignored",
        "extra_hosts": "dropped",
        "healthcheck": "ignored",
        "restart": "ignored",
        "container_name": "ignored",
        "init": "ignored",
        "tty": "ignored",
        "stdin_open": "ignored",
        "labels": "ignored",
        "working_dir": "ignored",
    }
    for key, outcome in expected.items():
        assert override(loaded, f"services.app.{key}").outcome == outcome, key
    assert loaded.run_args == ()
    assert override(loaded, "services.app.cap_add[0]").line == 5


def test_network_mode_host_of_the_cloister_is_dropped(workspace: Workspace) -> None:
    loaded = compose(workspace, APP + "    network_mode: host\n")
    assert override(loaded, "services.app.network_mode").outcome == "dropped"


@pytest.mark.parametrize(
    ("volume", "outcome", "why"),
    [
        ("/:/host", "refused", "the host's whole file system"),
        ("../../..:/home-dir", "refused", "no cloister may mount it"),
        ("/var/run/docker.sock:/var/run/docker.sock", "refused", "Docker socket"),
        ("~/.ssh:/root/.ssh:ro", "refused", "SSH keys"),
        ("../..:/workspaces:cached", "dropped", "Cloister mounts the project itself at /work"),
        ("..:/elsewhere", "dropped", "Cloister mounts the project itself at /work"),
        ("../../../other:/other", "refused", "outside the project"),
        ("./data:/work", "dropped", "would hide the project"),
        ("../data:/data:rw,z", "kept", "made read-only"),
        ("../data:/data:bogus", "dropped", "not understood: 'bogus'"),
    ],
)
def test_cloister_volumes_go_through_the_mount_rules(
    workspace: Workspace, volume: str, outcome: str, why: str
) -> None:
    (workspace.project / ".devcontainer" / "data").mkdir(parents=True, exist_ok=True)
    loaded = compose(workspace, APP + f"    volumes: [{volume!r}]\n")
    decision = override(loaded, "services.app.volumes[0]")
    assert decision.outcome == outcome
    assert why in decision.why
    assert [mount.read_only for mount in loaded.mounts] == ([True] if outcome == "kept" else [])


def test_env_file_outside_the_project_is_refused(workspace: Workspace) -> None:
    (workspace.home / "secrets.env").write_text("TOKEN=x\n")
    text = APP + "    env_file: [../../../secrets.env, {path: missing.env, required: false}]\n"
    loaded = compose(workspace, text)
    assert override(loaded, "services.app.env_file[0]").outcome == "refused"
    assert override(loaded, "services.app.env_file[1]").outcome == "ignored"
    assert loaded.container_env == {}


@pytest.mark.parametrize(
    ("build", "message"),
    [
        ("{context: ../../.., dockerfile: Dockerfile}", "outside the project"),
        ("{context: ., dockerfile: ../../../Dockerfile}", "outside the project"),
        ("{context: 'https://github.com/x/y.git'}", "remote context"),
        ("{context: ., dockerfile: Missing}", "no such file"),
    ],
)
def test_a_build_outside_the_project_is_an_error(
    workspace: Workspace, build: str, message: str
) -> None:
    (workspace.home / "Dockerfile").write_text("FROM debian\n")
    with pytest.raises(DevcontainerError, match=message) as error:
        compose(workspace, f"services:\n  app:\n    build: {build}\n")
    assert error.value.line == 3


def test_build_args_target_and_options(workspace: Workspace) -> None:
    text = (
        "services:\n"
        "  app:\n"
        "    image: ignored-name\n"
        "    build:\n"
        "      context: .\n"
        "      args: [VERSION=3, 'TOKEN=${GITHUB_TOKEN}']\n"
        "      target: dev\n"
        "      network: host\n"
        "      ssh: [default]\n"
    )
    loaded = compose(workspace, text)
    assert loaded.source.args == {"VERSION": "3"}
    assert loaded.source.target == "dev"
    assert override(loaded, "services.app.build.args.TOKEN").outcome == "refused"
    assert override(loaded, "services.app.build.network").outcome == "dropped"
    assert override(loaded, "services.app.build.ssh").outcome == "refused"
    assert override(loaded, "services.app.image").outcome == "ignored"


# --- the services beside it ---------------------------------------------------------------


def test_a_sidecar_is_hardened_with_each_reason(workspace: Workspace) -> None:
    text = APP + (
        "  db:\n"
        "    image: postgres:16\n"
        "    privileged: true\n"
        "    cap_add: [CHOWN, NET_ADMIN, CAP_SETUID]\n"
        "    security_opt: [apparmor=unconfined]\n"
        "    devices: [/dev/fuse]\n"
        "    pid: host\n"
        "    network_mode: host\n"
        "    extra_hosts: ['host.docker.internal:host-gateway']\n"
        "    dns: 8.8.8.8\n"
        "    sysctls: {net.core.somaxconn: 1024}\n"
        "    ulimits: {nofile: 65536}\n"
        "    platform: linux/amd64\n"
        "    container_name: pg\n"
        "    restart: always\n"
        "    deploy: {resources: {limits: {memory: 1g}}}\n"
        "    profiles: [db]\n"
        "    ports: ['127.0.0.1:5432:5432', '6000-6002', '53/udp', {target: 8080, published: 80}]\n"
        "    volumes:\n"
        "      - /var/run/docker.sock:/var/run/docker.sock\n"
        "      - /:/host\n"
        "      - ./init:/docker-entrypoint-initdb.d\n"
        "      - /var/lib/postgresql/data\n"
        "      - {type: tmpfs, target: /tmp}\n"
        "    tmpfs: /run\n"
    )
    (workspace.project / ".devcontainer" / "init").mkdir(parents=True)
    loaded = compose(workspace, text)
    db = service(loaded, "db")
    assert db.ports == (5432, 6000, 6001, 6002, 8080)
    init = (workspace.project / ".devcontainer" / "init").resolve()
    assert db.mounts == (
        MountSpec("bind", str(init), "/docker-entrypoint-initdb.d", True),
        MountSpec("volume", None, "/var/lib/postgresql/data", False),
        MountSpec("tmpfs", None, "/tmp", False),
        MountSpec("tmpfs", None, "/run", False),
    )
    outcomes = {
        "privileged": "dropped",
        "cap_add[0]": "kept",
        "cap_add[1]": "dropped",
        "cap_add[2]": "kept",
        "security_opt[0]": "dropped",
        "devices": "dropped",
        "pid": "dropped",
        "network_mode": "dropped",
        "extra_hosts": "dropped",
        "dns": "dropped",
        "sysctls": "dropped",
        "ulimits": "dropped",
        "platform": "ignored",
        "container_name": "ignored",
        "restart": "ignored",
        "deploy": "ignored",
        "profiles": "ignored",
        "ports[0]": "dropped",
        "ports[1]": "kept",
        "ports[2]": "ignored",
        "ports[3]": "dropped",
        "volumes[0]": "refused",
        "volumes[1]": "refused",
        "volumes[2]": "kept",
    }
    for key, outcome in outcomes.items():
        assert override(loaded, f"services.db.{key}").outcome == outcome, key
    assert "`cloister port NAME PORT` publishes one" in override(loaded, "services.db.ports[0]").why


def test_sidecar_commands_user_and_working_dir(workspace: Workspace) -> None:
    text = APP + (
        "  worker:\n"
        "    image: python:3\n"
        "    command: python -m worker --name 'a b'\n"
        "    entrypoint: [/bin/sh, -c]\n"
        "    user: '999:999'\n"
        "    working_dir: /srv\n"
        "    healthcheck: {test: 'curl -f localhost', interval: 1m30s, start_interval: 1s}\n"
        "  quiet:\n"
        "    image: busybox\n"
        "    healthcheck: {disable: true}\n"
    )
    loaded = compose(workspace, text)
    worker = service(loaded, "worker")
    assert worker.command == ("python", "-m", "worker", "--name", "a b")
    assert worker.entrypoint == ("/bin/sh", "-c")
    assert (worker.user, worker.working_dir) == ("999:999", "/srv")
    assert worker.healthcheck == {
        "test": ["CMD-SHELL", "curl -f localhost"],
        "interval": 90_000_000_000,
    }
    assert override(loaded, "services.worker.healthcheck.start_interval").outcome == "ignored"
    assert service(loaded, "quiet").healthcheck == {"test": ["NONE"]}


def test_a_sidecar_joining_the_cloister_namespace_is_kept(workspace: Workspace) -> None:
    text = APP + "  db:\n    image: postgres\n    network_mode: service:app\n"
    loaded = compose(workspace, text)
    assert service(loaded, "db").shares_cloister_network
    assert override(loaded, "services.db.network_mode").outcome == "kept"


def test_volumes_external_or_with_a_driver_are_refused(workspace: Workspace) -> None:
    text = APP + (
        "  db:\n"
        "    image: postgres\n"
        "    volumes: ['shared:/a', 'bound:/b', 'fine:/c']\n"
        "volumes:\n"
        "  shared: {external: true}\n"
        "  bound: {driver_opts: {type: none, o: bind, device: /etc}}\n"
        "  fine: {name: global-name}\n"
    )
    loaded = compose(workspace, text)
    assert service(loaded, "db").mounts == (MountSpec("volume", "fine", "/c", False),)
    assert override(loaded, "volumes.shared.external").outcome == "refused"
    assert override(loaded, "volumes.bound.driver_opts").outcome == "refused"
    assert override(loaded, "volumes.fine.name").outcome == "ignored"
    assert override(loaded, "services.db.volumes[0]").outcome == "refused"
    assert override(loaded, "services.db.volumes[1]").outcome == "refused"


def test_an_undeclared_volume_is_an_error(workspace: Workspace) -> None:
    with pytest.raises(DevcontainerError, match="'nope' is not declared") as error:
        compose(workspace, APP + "  db:\n    image: postgres\n    volumes: ['nope:/x']\n")
    assert error.value.line == 6


@pytest.mark.parametrize(
    ("text", "message", "line"),
    [
        (APP + "  db:\n    image: x\n    depends_on: [cache]\n", "needs 'cache'", 6),
        (
            APP + "  a: {image: x, depends_on: [b]}\n  b: {image: x, depends_on: [a]}\n",
            "depend on each other: a -> b -> a",
            4,
        ),
        (APP + "  bad.name: {image: x}\n", "a service name is a DNS label", 4),
        (APP + "  cloister-guardian-proxy: {image: x}\n", "Cloister's own", 4),
        (APP + "  db: {image: x, ports: ['99999']}\n", "is not a port", 4),
        (APP + "  db: {image: x, healthcheck: {interval: soon}}\n", "not a duration", 4),
        (APP + "  db: {build: {context: ../../..}}\n", "outside the project", 4),
        ("services:\n  app: {}\n", "neither `image` nor `build`", 2),
        ("services: [app]\n", "expected a mapping of services", 1),
        ("- not a mapping\n", "expected a mapping at the top", 1),
        ("services:\n  app:\n\timage: x\n", "indented with a tab", 3),
    ],
)
def test_malformed_compose_files_are_errors_at_their_line(
    workspace: Workspace, text: str, message: str, line: int
) -> None:
    with pytest.raises(DevcontainerError, match=message) as error:
        compose(workspace, text)
    assert error.value.path.name == "compose.yml"
    assert error.value.line == line


def test_extends_and_unknown_keys_are_noted(workspace: Workspace) -> None:
    text = APP + "    extends: {service: base}\n    x-note: hi\n    colour: blue\nx-common: {}\n"
    loaded = compose(workspace, text)
    assert override(loaded, "services.app.extends").outcome == "ignored"
    assert override(loaded, "services.app.colour").why.startswith("not a compose service property")
    assert override(loaded, "x-common").outcome == "ignored"


def test_yaml_anchors_and_merge_keys_are_read(workspace: Workspace) -> None:
    text = (
        "x-db: &db\n"
        "  image: postgres:16\n"
        "  environment: {POSTGRES_PASSWORD: pw}\n" + APP + "  primary: {<<: *db}\n"
        "  replica:\n"
        "    <<: *db\n"
        "    environment: {ROLE: replica}\n"
    )
    loaded = compose(workspace, text)
    assert service(loaded, "primary").environment == {"POSTGRES_PASSWORD": "pw"}
    assert service(loaded, "replica").environment == {"ROLE": "replica"}
    image = override(loaded, "services.replica.image")
    assert image.line == 2  # where the anchor wrote it


# --- hostile files ------------------------------------------------------------------------


def test_a_billion_laughs_file_stops_at_the_value_limit(workspace: Workspace) -> None:
    lines = ['a0: &a0 ["x","x","x","x","x","x","x","x","x","x"]']
    lines += [f"a{n}: &a{n} [" + ",".join([f"*a{n - 1}"] * 10) + "]" for n in range(1, 12)]
    lines += ["services:", "  app:", "    image: debian", "    environment: {A: '1'}"]
    lines += ["    labels: *a11"]
    with pytest.raises(DevcontainerError, match="over 100000 values"):
        compose(workspace, "\n".join(lines) + "\n")


def test_deep_nesting_and_huge_files_are_refused(workspace: Workspace) -> None:
    with pytest.raises(DevcontainerError, match="nested too deeply"):
        compose(workspace, APP + "x-deep: " + "[" * 200 + "]" * 200 + "\n")
    with pytest.raises(DevcontainerError, match="over 256 KiB is refused"):
        compose(workspace, APP + "x-big: '" + "a" * (256 * 1024) + "'\n")


def test_a_fifo_env_file_does_not_hang(workspace: Workspace) -> None:
    fifo = workspace.project / ".devcontainer" / "fifo.env"
    fifo.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(fifo)
    with pytest.raises(DevcontainerError, match="not a regular file"):
        compose(workspace, APP + "    env_file: fifo.env\n")


def test_too_many_compose_files_are_refused(workspace: Workspace) -> None:
    for index in range(9):
        workspace.write(APP, f".devcontainer/c{index}.yml")
    names = ", ".join(f'"c{index}.yml"' for index in range(9))
    with pytest.raises(DevcontainerError, match="at most 8 files"):
        compose(
            workspace,
            APP,
            devcontainer=f'{{"dockerComposeFile": [{names}], "service": "app"}}',
        )


# --- git directories: no service gets the human's -----------------------------------------


@pytest.mark.parametrize(
    ("volume", "why"),
    [
        ("..:/src:ro", "is the project itself"),
        ("../.git:/g", "is inside a git directory"),
        ("../.git/config:/g:ro", "is inside a git directory"),
        ("../sub:/s", "sub/.git, a git directory"),
        ("../planted:/p", "is a symbolic link"),
        ("../planted/hooks:/p", "is a symbolic link"),
    ],
)
def test_no_service_mounts_a_git_directory(workspace: Workspace, volume: str, why: str) -> None:
    (workspace.project / ".git" / "hooks").mkdir(parents=True)
    (workspace.project / ".git" / "config").write_text("[core]\n")
    (workspace.project / "sub" / ".git").mkdir(parents=True)
    (workspace.project / "planted").symlink_to(".git")
    text = (
        APP
        + f"    volumes: [{volume!r}]\n"
        + f"  db:\n    image: postgres:16\n    volumes: [{volume!r}]\n"
    )
    loaded = compose(workspace, text)
    for field in ("services.db.volumes[0]", "services.app.volumes[0]"):
        decision = override(loaded, field)
        if field.startswith("services.app") and why == "is the project itself":
            # The cloister's service: dropped, as Cloister mounts the project itself.
            assert decision.outcome == "dropped", decision.describe()
            continue
        assert (decision.outcome, why in decision.why) == ("refused", True), decision.describe()
    assert loaded.mounts == ()
    assert service(loaded, "db").mounts == ()


@pytest.mark.parametrize(
    ("build", "message"),
    [
        ("{context: ../.git, dockerfile: ../.devcontainer/Dockerfile}", "context: "),
        ("{context: ../.git/hooks, dockerfile: ../../.devcontainer/Dockerfile}", "context: "),
        ("{context: ., dockerfile: ../.git/config}", "dockerfile: "),
    ],
)
def test_no_build_reads_the_projects_git_directory(
    workspace: Workspace, build: str, message: str
) -> None:
    (workspace.project / ".git" / "hooks").mkdir(parents=True)
    (workspace.project / ".git" / "config").write_text("[core]\n")
    for name in ("app", "db"):
        text = APP if name == "db" else ""
        text = (text or "services:\n") + f"  {name}:\n    build: {build}\n"
        with pytest.raises(DevcontainerError, match=message + ".* is inside a git directory"):
            compose(workspace, text)


def test_a_dotenv_linking_outside_the_project_is_not_read(workspace: Workspace) -> None:
    (workspace.home / "secrets.env").write_text("IMAGE_TAG=from-home\n")
    (workspace.project / ".devcontainer").mkdir(parents=True, exist_ok=True)
    (workspace.project / ".devcontainer" / ".env").symlink_to(workspace.home / "secrets.env")
    text = APP + "    environment: {TAG: '${IMAGE_TAG:-unset}'}\n"
    loaded = compose(workspace, text)
    assert loaded.container_env["TAG"] == "unset"
