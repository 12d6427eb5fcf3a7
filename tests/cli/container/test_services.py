"""A compose devcontainer's other services with no engine: their names, their order,
what their containers get (and do not), their images, and finding and removing them
(they run for real in tests/cli/test_acceptance_compose.py)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from cloister_cli.container import cloisters, ports, services
from cloister_cli.images.projectimages.model import KEY_LABEL, PROJECT_LABEL, ProjectImageError
from cloister_cli.session import gc
from cloister_cli.start import dryrun
from cloister_core import stack
from cloister_core.config.models import DefaultsConfig
from cloister_core.devcontainer.model import ComposeService, ImageSource, MountSpec
from cloister_core.tokens import TokenRecord
from tests.cli.engine_support import INSTANCE
from tests.cli.session.test_gc import context_for
from tests.fake_engine import FakeEngine


def service(name: str = "db", **changes: object) -> ComposeService:
    made = ComposeService(
        name=name,
        source=ImageSource("image", image="redis:local"),
        environment={"REDIS_ARGS": "--save ''"},
        command=("redis-server", "--protected-mode", "no"),
        entrypoint=None,
        user=None,
        working_dir=None,
        mounts=(),
        ports=(6379,),
        healthcheck=None,
        depends_on=(),
        shares_cloister_network=False,
    )
    return replace(made, **changes)  # type: ignore[arg-type]


def plans_for(engine: FakeEngine, root: Path, *given: ComposeService) -> list[services.ServicePlan]:
    return services.plan(
        engine.client,
        INSTANCE,
        cloister="my-api",
        project="my-api",
        root=root,
        services=given,
        limits=DefaultsConfig(memory="1g", cpus=1.5, pids=256),
    )


@pytest.mark.parametrize(
    "name", ["cloister-guardian-proxy", "cloister", "localhost", "DB", "db;x", "", "a" * 64]
)
def test_a_name_that_could_answer_for_the_guardian_or_is_no_dns_name_is_refused(
    name: str,
) -> None:
    with pytest.raises(services.ServiceError, match="rename it"):
        services.check_name(name)


def test_services_start_after_those_they_depend_on() -> None:
    web = service("web", depends_on=("db", "cache", "app"))  # app: the cloister's own
    db = service("db", depends_on=("cache",))
    cache = service("cache")
    assert [each.name for each in services.order([web, db, cache])] == ["cache", "db", "web"]


def test_services_that_depend_on_each_other_in_a_circle_are_refused() -> None:
    with pytest.raises(services.ServiceError, match="circle: a -> b -> a"):
        services.order([service("a", depends_on=("b",)), service("b", depends_on=("a",))])


def test_a_service_container_is_hardened_and_gets_nothing_of_the_cloisters(
    tmp_path: Path,
) -> None:
    engine = FakeEngine()
    engine.add_image("redis:local")
    (plan,) = plans_for(engine, tmp_path, service())
    kwargs = plan.run_kwargs("cloister-id")
    assert kwargs["name"] == INSTANCE.sidecar("my-api", "db")
    assert kwargs["network"] == INSTANCE.cloister("my-api")
    assert kwargs["hostname"] == "db"
    assert kwargs["cap_drop"] == ["ALL"]
    assert kwargs["cap_add"] == ["CHOWN", "DAC_OVERRIDE", "FOWNER", "SETUID", "SETGID"]
    assert kwargs["security_opt"] == ["no-new-privileges:true"]
    assert (kwargs["mem_limit"], kwargs["nano_cpus"], kwargs["pids_limit"]) == (
        "1g",
        1_500_000_000,
        256,
    )
    for absent in ("ports", "privileged", "devices", "pid_mode", "ipc_mode", "extra_hosts"):
        assert absent not in kwargs
    assert kwargs["environment"] == {"REDIS_ARGS": "--save ''"}
    token = TokenRecord.create(cloister="my-api", project="my-api", branch=None, path=tmp_path)
    ours = cloisters.environment_for(token)
    assert not set(ours) & set(kwargs["environment"])
    assert token.secret not in repr(kwargs)
    assert kwargs["labels"][stack.LABEL_SERVICE_OF] == "my-api"
    assert kwargs["labels"][stack.LABEL_SERVICE] == "db"
    assert kwargs["labels"][stack.LABEL_SERVICE_CONTAINER] == "cloister-id"
    assert stack.LABEL_CLOISTER not in kwargs["labels"]  # no listing takes it for a cloister


def test_a_service_the_cloister_shares_its_network_with_joins_the_cloisters_namespace(
    tmp_path: Path,
) -> None:
    engine = FakeEngine()
    engine.add_image("redis:local")
    (plan,) = plans_for(engine, tmp_path, service(shares_cloister_network=True))
    kwargs = plan.run_kwargs("cloister-id")
    assert kwargs["network_mode"] == "container:cloister-id"
    assert "network" not in kwargs
    assert "hostname" not in kwargs


def test_started_services_are_on_the_cloisters_network_under_their_name(tmp_path: Path) -> None:
    engine = FakeEngine()
    engine.add_image("redis:local")
    engine.add_network(INSTANCE.cloister("my-api"))
    cloister = engine.add_container(INSTANCE.cloister("my-api"), {stack.LABEL_CLOISTER: "my-api"})
    plans = plans_for(engine, tmp_path, service())
    (started,) = services.start(engine.client, plans, cloister)
    assert started.status == "running"
    (run,) = engine.called("containers.run")
    network = INSTANCE.cloister("my-api")
    assert run["networking_config"] == {network: {"aliases": ["db"]}}
    assert started.id in engine.networks.by_name[network].members


def test_a_service_that_exits_fails_with_its_last_lines(tmp_path: Path) -> None:
    engine = FakeEngine()
    engine.add_image("redis:local")
    engine.add_network(INSTANCE.cloister("my-api"))
    cloister = engine.add_container(INSTANCE.cloister("my-api"), {stack.LABEL_CLOISTER: "my-api"})
    engine.containers.next_exits = True
    engine.containers.next_logs = b"FATAL: bad config\n"
    plans = plans_for(engine, tmp_path, service())
    with pytest.raises(services.ServiceError, match=r"'db' exited .*FATAL: bad config"):
        services.start(engine.client, plans, cloister)


def test_another_projects_own_image_is_refused(tmp_path: Path) -> None:
    """It may hold that project's files: a service of this one must not serve them."""
    engine = FakeEngine()
    engine.add_image("redis:local", labels={PROJECT_LABEL: "other"})
    with pytest.raises(services.ServiceError, match="'db': image 'redis:local' is project 'oth"):
        plans_for(engine, tmp_path, service())


def test_an_image_not_on_this_machine_is_named_and_never_pulled(tmp_path: Path) -> None:
    engine = FakeEngine()
    with pytest.raises(services.ServiceError, match="'db': image 'redis:local' is not on this"):
        plans_for(engine, tmp_path, service())
    assert not engine.called("images.pull")


def write_build(root: Path, dockerfile: str) -> ImageSource:
    (root / "db").mkdir(parents=True)
    (root / "db" / "Dockerfile").write_text(dockerfile)
    (root / "db" / "redis.conf").write_text("port 6379\n")
    return ImageSource("build", dockerfile=root / "db" / "Dockerfile", context=root / "db")


def test_a_built_service_image_is_keyed_by_its_inputs_and_reused(tmp_path: Path) -> None:
    engine = FakeEngine()
    engine.add_image("debian:bookworm-slim")
    source = write_build(tmp_path, "FROM debian:bookworm-slim\nCOPY redis.conf /etc/\n")
    (plan,) = plans_for(engine, tmp_path, service(source=source))
    assert plan.image.tag.startswith("cloister-service-my-api-db:")
    assert plan.image.build is not None
    key = plan.image.build.key
    engine.add_image(plan.image.tag, labels={KEY_LABEL: str(key)})
    (again,) = plans_for(engine, tmp_path, service(source=source))
    assert again.image.build is None
    assert again.image.tag == plan.image.tag
    (source.context or tmp_path).joinpath("redis.conf").write_text("port 6380\n")
    (changed,) = plans_for(engine, tmp_path, service(source=source))
    assert changed.image.tag != plan.image.tag


def test_a_build_context_changed_after_it_was_planned_is_never_built(tmp_path: Path) -> None:
    """The context is scanned when the start plans, and built once the cloister runs:
    the agent may rewrite it in between. Built anyway, it would be kept under the key of
    what was read."""
    engine = FakeEngine()
    engine.add_image("debian:bookworm-slim")
    engine.add_network(INSTANCE.cloister("my-api"))
    cloister = engine.add_container(INSTANCE.cloister("my-api"), {stack.LABEL_CLOISTER: "my-api"})
    source = write_build(tmp_path, "FROM debian:bookworm-slim\nCOPY redis.conf /etc/\n")
    plans = plans_for(engine, tmp_path, service(source=source))
    (tmp_path / "db" / "redis.conf").write_text("port 6666\n")
    with pytest.raises(ProjectImageError, match=r"'[^']*/db/redis\.conf' changed since it was"):
        services.start(engine.client, plans, cloister)
    assert engine.builds == []
    assert engine.called("containers.run") == []


def test_a_build_from_an_image_not_on_this_machine_is_refused(tmp_path: Path) -> None:
    engine = FakeEngine()
    source = write_build(tmp_path, "FROM redis:7\n")
    with pytest.raises(services.ServiceError, match="FROM redis:7 is not on this machine"):
        plans_for(engine, tmp_path, service(source=source))


def test_a_build_context_outside_the_project_is_refused(tmp_path: Path) -> None:
    engine = FakeEngine()
    source = write_build(tmp_path, "FROM scratch\n")
    with pytest.raises(services.ServiceError, match="outside the project"):
        plans_for(engine, tmp_path / "elsewhere", service(source=source))


def test_a_bind_mount_outside_the_project_is_refused_and_one_inside_is_read_only(
    tmp_path: Path,
) -> None:
    engine = FakeEngine()
    engine.add_image("redis:local")
    inside = MountSpec("bind", str(tmp_path / "seed"), "/seed", read_only=False)
    (plan,) = plans_for(engine, tmp_path, service(mounts=(inside,)))
    assert [(mount["Source"], mount["ReadOnly"]) for mount in plan.mounts] == [
        (str(tmp_path / "seed"), True)
    ]
    outside = MountSpec("bind", "/etc", "/host-etc", read_only=True)
    with pytest.raises(services.ServiceError, match="'/etc' is outside the project"):
        plans_for(engine, tmp_path, service(mounts=(outside,)))


def test_named_volumes_are_the_projects_own(tmp_path: Path) -> None:
    engine = FakeEngine()
    engine.add_image("redis:local")
    volume = MountSpec("volume", "data", "/data", read_only=False)
    anonymous = MountSpec("volume", None, "/cache", read_only=False)
    (plan,) = plans_for(engine, tmp_path, service(mounts=(volume, anonymous)))
    named, unnamed = plan.mounts
    assert str(named["Source"]).startswith("cloister-my-api-data-")
    assert unnamed["Source"] is None


def add_service(engine: FakeEngine, cloister: str, name: str, cloister_id: str) -> None:
    labels = {
        **INSTANCE.labels,
        stack.LABEL_SERVICE_OF: cloister,
        stack.LABEL_SERVICE: name,
        stack.LABEL_SERVICE_CONTAINER: cloister_id,
    }
    engine.add_container(INSTANCE.sidecar(cloister, name), labels)


def test_stale_services_are_those_whose_cloister_is_gone_or_another(tmp_path: Path) -> None:
    engine = FakeEngine()
    alive = engine.add_container(
        INSTANCE.cloister("alive"), {**INSTANCE.labels, stack.LABEL_CLOISTER: "alive"}
    )
    add_service(engine, "alive", "db", alive.id)
    add_service(engine, "alive", "old", "an earlier container")
    add_service(engine, "gone", "db", "whatever")
    stale = services.stale(engine.client, INSTANCE)
    names = sorted(container.name or "" for container in stale)
    assert names == [INSTANCE.sidecar("alive", "old"), INSTANCE.sidecar("gone", "db")]
    assert sorted(services.remove_containers(stale)) == names
    assert services.find(engine.client, INSTANCE) != []


def test_remove_all_removes_one_cloisters_services_only(tmp_path: Path) -> None:
    engine = FakeEngine()
    add_service(engine, "one", "db", "x")
    add_service(engine, "one", "cache", "x")
    add_service(engine, "two", "db", "y")
    removed = services.remove_all(engine.client, INSTANCE, "one")
    assert sorted(removed) == [INSTANCE.sidecar("one", "cache"), INSTANCE.sidecar("one", "db")]
    assert [each.name for each in services.find(engine.client, INSTANCE)] == [
        INSTANCE.sidecar("two", "db")
    ]
    assert services.find_one(engine.client, INSTANCE, "two", "db") is not None
    assert services.find_one(engine.client, INSTANCE, "one", "db") is None


# -- cloister port --service, cloister logs --service ---------------------------------------


def port_engine(shared: bool = False) -> FakeEngine:
    engine = FakeEngine()
    network = INSTANCE.cloister("my-api")
    engine.add_network(network, subnet="10.213.0.0/27")
    engine.containers.next_logs = b"cloister-forwarder: listening on 172.30.0.2:9996\n"
    owner = engine.add_container(
        network,
        {**INSTANCE.labels, stack.LABEL_CLOISTER: "my-api"},
        NetworkSettings={"Networks": {network: {"IPAddress": "10.213.0.30"}}},
    )
    mode = f"container:{owner.id}" if shared else network
    own = {} if shared else {network: {"IPAddress": "10.213.0.5"}}
    engine.add_container(
        INSTANCE.sidecar("my-api", "db"),
        {
            **INSTANCE.labels,
            stack.LABEL_SERVICE_OF: "my-api",
            stack.LABEL_SERVICE: "db",
            stack.LABEL_SERVICE_CONTAINER: owner.id,
        },
        NetworkSettings={"Networks": own},
        HostConfig={"NetworkMode": mode},
    )
    return engine


@pytest.mark.parametrize(("shared", "address"), [(False, "10.213.0.5"), (True, "10.213.0.30")])
def test_a_services_port_is_published_from_its_address(shared: bool, address: str) -> None:
    engine = port_engine(shared)
    published = ports.publish(
        engine.client,
        INSTANCE,
        "my-api",
        ports.parse_spec("6379:16379"),
        image="cloister-proxy:latest",
        ui_port=9999,
        service="db",
    )
    assert published.forward.service == "db"
    assert published.forward.container == INSTANCE.forwarder("my-api", 6379, "db")
    (kwargs,) = engine.called("containers.create")
    assert kwargs["command"][1] == f"{address}:6379"
    # The cloister's own port 6379 is another forward.
    assert INSTANCE.forwarder("my-api", 6379) != published.forward.container
    with pytest.raises(ports.PortError, match="publishes no port 6379"):
        ports.remove(engine.client, INSTANCE, "my-api", 6379)
    assert ports.remove(engine.client, INSTANCE, "my-api", 6379, "db").service == "db"


def test_a_port_of_a_service_that_does_not_run_is_refused() -> None:
    engine = port_engine()
    with pytest.raises(ports.PortError, match="runs no compose service 'cache'"):
        ports.publish(
            engine.client,
            INSTANCE,
            "my-api",
            ports.parse_spec("6379"),
            image="cloister-proxy:latest",
            ui_port=9999,
            service="cache",
        )


def test_a_services_output_is_shown_escaped_and_an_unknown_one_named() -> None:
    engine = port_engine()
    db = engine.containers.get(INSTANCE.sidecar("my-api", "db"))
    db.logs_text = b"Ready to accept connections\n\x1b]0;owned\x07\n"
    lines = list(services.output(engine.client, INSTANCE, "my-api", "db"))
    assert lines[0] == "Ready to accept connections"
    assert "\x1b" not in lines[1]
    assert "\x07" not in lines[1]
    with pytest.raises(services.ServiceError, match=r"no compose service 'web' \(it has: db\)"):
        list(services.output(engine.client, INSTANCE, "my-api", "web"))


def test_the_dry_run_shows_a_service_as_it_would_run(tmp_path: Path) -> None:
    engine = FakeEngine()
    engine.add_image("redis:local")
    health = {"test": ["CMD", "redis-cli", "ping"], "interval": 2_000_000_000, "retries": 5}
    (plan,) = plans_for(engine, tmp_path, service(healthcheck=health, entrypoint=("tini", "--")))
    argv = dryrun.service_argv(plan)
    text = " ".join(argv)
    assert "--network-alias db" in text
    assert "--cap-drop ALL" in text
    assert "--cap-add CHOWN" in text
    assert "--health-cmd 'redis-cli ping'" in dryrun.command_text(argv)
    assert "--health-interval 2s" in text
    assert argv[argv.index("--entrypoint") + 1] == "tini"
    assert argv[-5:] == ["redis:local", "--", "redis-server", "--protected-mode", "no"]
    assert "--publish" not in text


def test_gc_removes_the_services_whose_cloister_is_gone(tmp_path: Path) -> None:
    engine = FakeEngine()
    context = context_for(tmp_path, engine)
    alive = engine.add_container(
        INSTANCE.cloister("alive"),
        {**INSTANCE.labels, stack.LABEL_CLOISTER: "alive", stack.LABEL_PATH: str(tmp_path)},
    )
    add_service(engine, "alive", "db", alive.id)
    add_service(engine, "gone", "db", "whatever")
    found = gc.survey(context)
    assert found.stale_services == [INSTANCE.sidecar("gone", "db")]
    assert not found.empty
    assert gc.collect(context, found).services == [INSTANCE.sidecar("gone", "db")]
    assert [each.name for each in services.find(engine.client, INSTANCE)] == [
        INSTANCE.sidecar("alive", "db")
    ]
