"""``cloister doctor`` without an engine: the probe's output, the engine's checks on a fake
engine, the table and --json, the exit status, and the start's once-per-engine check."""

from __future__ import annotations

import json
import shutil
from concurrent.futures import Future
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import docker
import docker.errors
import pytest
from click.testing import CliRunner

from cloister_cli.commands.doctor import doctor as doctor_command
from cloister_cli.container import listing
from cloister_cli.container.cloisters import CloisterStartError
from cloister_cli.stack import doctor, executor_process
from cloister_cli.stack.doctor import CHECKS, Check, Report
from cloister_cli.start import apply
from cloister_core import stack
from cloister_core.config.models import GlobalConfig
from cloister_core.paths import CloisterPaths
from tests.fake_engine import FakeContainer, FakeEngine

CLOISTER = "my-api"


@pytest.fixture
def paths(tmp_path: Path) -> CloisterPaths:
    return CloisterPaths(tmp_path / "config", tmp_path / "data")


@pytest.fixture
def instance(paths: CloisterPaths) -> stack.Instance:
    return stack.Instance.of(paths, 1000)


# -- the probe's output ----------------------------------------------------------------------


def test_probe_lines_become_checks_in_the_order_asked() -> None:
    output = (
        "egress.udp\tpass\t1.1.1.1:53: sent, no answer\negress.tcp\tfail\t1.1.1.1:443: connected\n"
    )
    checks = doctor.parse_probe(output, ["egress.tcp", "egress.udp"])
    assert [(check.id, check.passed) for check in checks] == [
        ("egress.tcp", False),
        ("egress.udp", True),
    ]
    assert checks[0].evidence == "1.1.1.1:443: connected"
    assert checks[0].family == "egress"
    assert checks[0].source == "network"
    assert checks[0].fix == CHECKS["egress.tcp"].fix


def test_a_check_reported_twice_fails() -> None:
    output = "egress.tcp\tfail\t1.1.1.1:443: connected\negress.tcp\tpass\tforged\n"
    (check,) = doctor.parse_probe(output, ["egress.tcp"])
    assert not check.passed
    assert check.evidence == "the probe reported it twice"


def test_evidence_is_cut_short() -> None:
    (check,) = doctor.parse_probe("egress.tcp\tpass\t" + "x" * 5000 + "\n", ["egress.tcp"])
    assert len(check.evidence) == doctor.EVIDENCE_LIMIT + 1
    assert check.evidence.endswith("…")


def test_each_check_says_whether_the_network_or_the_engine_saw_it() -> None:
    assert Check.of("proxy.literals", True, "").source == "network"
    assert Check.of("engine.attached", True, "").source == "engine"
    assert Check.of("unreachable.filesystem", True, "").source == "engine"


def test_a_check_the_probe_did_not_report_fails() -> None:
    (check,) = doctor.parse_probe("egress.tcp\tpass\tfine\n", ["egress.dns"])
    assert not check.passed
    assert check.evidence == "the probe did not report it"


def test_lines_the_probe_should_not_write_are_ignored() -> None:
    output = (
        "egress.dns\tmaybe\tunclear\n"  # neither pass nor fail
        "engine.attached\tpass\tnot the probe's\n"  # not asked
        "garbage\n"
        "egress.dns\tpass\tno answer\x1b[31m\n"  # the agent's bytes in the evidence
    )
    (check,) = doctor.parse_probe(output, ["egress.dns"])
    assert check.passed
    assert "\x1b" not in check.evidence


def test_the_probe_is_given_its_targets_on_stdin() -> None:
    targets = doctor.Targets(
        docker0=("172.17.0.1",),
        hub=("172.17.0.1:9999",),
        others=("10.213.0.34",),
        proxy="10.213.0.2:3128",
        token="abc",
        control="cloister-x-my-api",
    )
    lines = doctor.probe_input(targets, ["egress.tcp"]).decode().splitlines()
    assert lines[-1] == "end"
    pairs = dict(line.split("\t", 1) for line in lines[:-1])
    assert pairs["docker0"] == "172.17.0.1"
    assert pairs["cloister"] == "10.213.0.34"
    assert pairs["check"] == "egress.tcp"
    assert pairs["proxy"] == "10.213.0.2:3128"
    assert pairs["token"] == "abc"
    assert pairs["resolver"] == "127.0.0.11"
    assert pairs["control"] == "cloister-x-my-api"


def test_a_parameter_with_a_line_break_is_refused() -> None:
    with pytest.raises(doctor.DoctorError, match="line break"):
        doctor.probe_input(doctor.Targets(token="abc\ncheck\tegress.tcp"), ["egress.dns"])


def test_the_proxy_is_aimed_at_by_address_with_the_cloisters_token(
    instance: stack.Instance,
) -> None:
    network = {
        "Containers": {
            "x": {"Name": instance.service("proxy"), "IPv4Address": "10.213.0.3/27"},
            "y": {"Name": "someone-else", "IPv4Address": "10.213.0.9/27"},
        }
    }
    assert doctor._proxy_address(network, instance) == f"10.213.0.3:{stack.PROXY_PORT}"
    assert doctor._proxy_address({}, instance) == ""
    env = {"Config": {"Env": ["A=b", "HTTPS_PROXY=http://cloister:s3cret@proxy:3128"]}}
    assert doctor._proxy_token(SimpleNamespace(attrs=env)) == "s3cret"
    assert doctor._proxy_token(SimpleNamespace(attrs={})) == ""


def test_the_sidecar_shares_only_the_network_and_holds_nothing(
    instance: stack.Instance,
) -> None:
    target = SimpleNamespace(id="c0ffee", name="cloister-x-my-api")
    client = SimpleNamespace(api=docker.APIClient(base_url="unix:///nonexistent", version="1.41"))
    config = doctor.sidecar_config(client, instance, target)
    host = config["host_config"]
    assert host["NetworkMode"] == "container:c0ffee"
    assert host["CapDrop"] == ["ALL"]
    assert host["SecurityOpt"] == ["no-new-privileges"]
    assert host["ReadonlyRootfs"] is True
    assert host["PidsLimit"] == 64
    assert "Binds" not in host
    assert "Mounts" not in host
    assert config["user"] == "65534:65534"
    assert config["image"] == "cloister-slim:latest"
    assert config["entrypoint"][:3] == ["/usr/bin/env", "-i", "PATH=/usr/bin:/bin"]
    assert config["labels"][stack.LABEL_DOCTOR] == "cloister-x-my-api"
    assert config["labels"][stack.LABEL_INSTANCE] == instance.id


def fake_docker(tmp_path: Path, script: str) -> str:
    """A ``docker`` command that runs *script* (sh) instead of attaching to a sidecar."""
    command = tmp_path / "docker"
    command.write_text("#!/bin/sh\n" + script, encoding="utf-8")
    command.chmod(0o755)
    return str(command)


def test_output_is_read_as_bytes_within_a_limit(tmp_path: Path) -> None:
    code, out, err = doctor._attached(
        [fake_docker(tmp_path, "cat; printf '\\377\\376'; echo oops >&2")], b"in\n", 10
    )
    assert (code, out, err) == (0, b"in\n\xff\xfe", b"oops\n")
    with pytest.raises(doctor.DoctorError, match="more than 65536 bytes"):
        doctor._attached([fake_docker(tmp_path, "exec yes")], b"", 10)
    with pytest.raises(doctor.DoctorError, match=r"did not finish within 0\.5s"):
        doctor._attached([fake_docker(tmp_path, "exec sleep 30")], b"", 0.5)


class Sidecars:
    """The engine's part of a probe run: its image, the sidecar made and removed."""

    def __init__(self, image: bool = True) -> None:
        self.made: list[dict[str, Any]] = []
        self.removed: list[str] = []
        self.image = image
        self.images = SimpleNamespace(get=self.get)
        self.api = SimpleNamespace(
            create_container=self.create,
            remove_container=self.remove,
            create_host_config=lambda **options: options,
        )

    def get(self, tag: str) -> object:
        if not self.image:
            raise docker.errors.ImageNotFound(tag)
        return object()

    def create(self, **config: Any) -> dict[str, str]:
        self.made.append(config)
        return {"Id": "sidecar1"}

    def remove(self, sidecar: str, force: bool) -> None:
        self.removed.append(sidecar)


def run_probe_with(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, instance: stack.Instance, script: str
) -> tuple[Sidecars, Any]:
    monkeypatch.setattr(shutil, "which", lambda name: fake_docker(tmp_path, script))
    sidecars = Sidecars()
    target = SimpleNamespace(id="c0ffee", name="cloister-x-my-api")
    try:
        return sidecars, doctor.run_probe(sidecars, instance, target, b"end\n", 5)  # type: ignore[arg-type]
    except doctor.DoctorError as error:
        return sidecars, error


def test_the_probes_bytes_are_decoded_without_failing(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, instance: stack.Instance
) -> None:
    sidecars, output = run_probe_with(
        monkeypatch, tmp_path, instance, "printf 'egress.tcp\\tpass\\t\\377\\n'"
    )
    assert output == "egress.tcp\tpass\t\ufffd\n"
    assert sidecars.removed == ["sidecar1"]
    assert sidecars.made[0]["host_config"]["network_mode"] == "container:c0ffee"


def test_a_probe_that_fails_is_an_error_not_output(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, instance: stack.Instance
) -> None:
    sidecars, error = run_probe_with(
        monkeypatch, tmp_path, instance, "echo 'egress.tcp\tpass\tx'; echo broken >&2; exit 3"
    )
    assert isinstance(error, doctor.DoctorError)
    assert "exit 3" in str(error)
    assert "broken" in str(error)
    assert sidecars.removed == ["sidecar1"]


def test_a_probe_that_hangs_is_removed(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, instance: stack.Instance
) -> None:
    monkeypatch.setattr(shutil, "which", lambda name: fake_docker(tmp_path, "sleep 30"))
    sidecars = Sidecars()
    target = SimpleNamespace(id="c0ffee", name="cloister-x-my-api")
    with pytest.raises(doctor.DoctorError, match="did not finish"):
        doctor.run_probe(sidecars, instance, target, b"end\n", 0.5)  # type: ignore[arg-type]
    assert sidecars.removed == ["sidecar1"]


def test_no_probe_image_is_said_plainly(instance: stack.Instance) -> None:
    sidecars = Sidecars(image=False)
    with pytest.raises(doctor.ProbeUnavailableError, match="cloister-slim:latest"):
        doctor.run_probe(sidecars, instance, SimpleNamespace(), b"", 5)  # type: ignore[arg-type]
    assert sidecars.made == []


def test_every_check_of_the_probe_is_in_the_probe() -> None:
    source = doctor.probe_source()
    for check_id in doctor.PROBE_CHECKS:
        assert f'$check{{"{check_id}"}}' in source, check_id
    assert set(doctor.CHEAP) <= set(doctor.PROBE_CHECKS)


# -- the engine's checks ---------------------------------------------------------------------


def sealed_cloister(engine: FakeEngine, instance: stack.Instance, **host: Any) -> FakeContainer:
    """Cloister CLOISTER as Cloister makes it, on its own guarded network; *host* changes its
    HostConfig."""
    name = instance.cloister(CLOISTER)
    engine.add_network(
        name,
        subnet="10.213.0.0/27",
        Internal=True,
        Options={"com.docker.network.bridge.inhibit_ipv4": "true"},
    )
    host_config: dict[str, Any] = {
        "CapAdd": None,
        "CapDrop": ["ALL"],
        "SecurityOpt": ["no-new-privileges:true"],
        "Privileged": False,
    } | host
    return engine.add_container(
        name,
        {**instance.labels, stack.LABEL_CLOISTER: CLOISTER},
        HostConfig=host_config,
        NetworkSettings={"Networks": {name: {"IPAddress": "10.213.0.2"}}},
        Mounts=[{"Type": "bind", "Source": "/home/me/my-api", "Destination": "/work", "RW": True}],
    )


def failed_ids(checks: list[Check]) -> set[str]:
    return {check.id for check in checks if not check.passed}


def test_a_sealed_container_passes(paths: CloisterPaths, instance: stack.Instance) -> None:
    engine = FakeEngine()
    container = sealed_cloister(engine, instance)
    checks = doctor.container_checks(engine.client, instance, paths, container)
    assert failed_ids(checks) == set()
    assert {check.id for check in checks} == {
        "engine.network",
        "engine.attached",
        "engine.capabilities",
        "engine.no-new-privileges",
        "engine.privileged",
        "engine.docker-socket",
        "engine.executor",
        "unreachable.filesystem",
        "unreachable.refs",
    }
    assert {check.source for check in checks} == {"engine"}


@pytest.mark.parametrize(
    ("mount", "failure"),
    [
        (
            {"Source": "/etc", "Destination": "/host-etc", "RW": True},
            {"unreachable.filesystem"},
        ),
        (
            {"Source": "/srv/lib", "Destination": "/refs/lib", "RW": True},
            {"unreachable.filesystem", "unreachable.refs"},
        ),
    ],
)
def test_a_writable_mount_outside_work_or_of_refs_fails(
    paths: CloisterPaths, instance: stack.Instance, mount: dict[str, Any], failure: set[str]
) -> None:
    engine = FakeEngine()
    container = sealed_cloister(engine, instance)
    container.attrs["Mounts"] += [
        {"Type": "bind", "Source": "/home/me/.codex", "Destination": "/home/cloister/.codex",
         "RW": True},
        {"Type": "bind", "Source": "/srv/other", "Destination": "/refs/other", "RW": False},
        {"Type": "bind", **mount},
    ]  # fmt: skip
    checks = doctor.container_checks(engine.client, instance, paths, container)
    assert failed_ids(checks) == failure
    for found in (check for check in checks if check.id in failure):
        assert mount["Destination"] in found.evidence


@pytest.mark.parametrize(
    ("host", "failure"),
    [
        ({"CapAdd": ["NET_RAW"]}, "engine.capabilities"),
        ({"SecurityOpt": []}, "engine.no-new-privileges"),
        ({"Privileged": True}, "engine.privileged"),
    ],
)
def test_a_weakened_container_fails_that_check(
    paths: CloisterPaths, instance: stack.Instance, host: dict[str, Any], failure: str
) -> None:
    engine = FakeEngine()
    container = sealed_cloister(engine, instance, **host)
    checks = doctor.container_checks(engine.client, instance, paths, container)
    assert failed_ids(checks) == {failure}


def test_a_mounted_engine_socket_fails(paths: CloisterPaths, instance: stack.Instance) -> None:
    engine = FakeEngine()
    container = sealed_cloister(engine, instance)
    container.attrs["Mounts"].append(
        {"Type": "bind", "Source": "/var/run/docker.sock", "Destination": "/var/run/docker.sock"}
    )
    checks = doctor.container_checks(engine.client, instance, paths, container)
    assert failed_ids(checks) == {"engine.docker-socket"}


def test_the_executors_directory_mounted_fails(
    paths: CloisterPaths, instance: stack.Instance
) -> None:
    engine = FakeEngine()
    container = sealed_cloister(engine, instance)
    source = str(paths.data_dir.resolve())  # holds <data>/run
    container.attrs["Mounts"].append({"Type": "bind", "Source": source, "Destination": "/x"})
    checks = doctor.container_checks(engine.client, instance, paths, container)
    assert failed_ids(checks) == {"engine.executor"}


def test_a_second_network_fails(paths: CloisterPaths, instance: stack.Instance) -> None:
    engine = FakeEngine()
    container = sealed_cloister(engine, instance)
    container.attrs["NetworkSettings"]["Networks"]["bridge"] = {"IPAddress": "172.17.0.5"}
    checks = doctor.container_checks(engine.client, instance, paths, container)
    assert failed_ids(checks) == {"engine.attached"}


def test_a_network_that_is_not_internal_fails(
    paths: CloisterPaths, instance: stack.Instance
) -> None:
    engine = FakeEngine()
    container = sealed_cloister(engine, instance)
    engine.networks.by_name[instance.cloister(CLOISTER)].attrs["Internal"] = False
    checks = doctor.container_checks(engine.client, instance, paths, container)
    assert failed_ids(checks) == {"engine.network"}
    (network,) = (check for check in checks if check.id == "engine.network")
    assert "internal=False" in network.evidence


def guardian_engine(instance: stack.Instance, host_ip: str = "127.0.0.1") -> FakeEngine:
    engine = FakeEngine()
    for service in stack.SERVICES:
        ports = (
            {"9999/tcp": [{"HostIp": host_ip, "HostPort": "9999"}]} if service == "approval" else {}
        )
        engine.add_container(
            instance.service(service),
            {**instance.labels, stack.LABEL_GUARDIAN: "true"},
            NetworkSettings={"Ports": ports},
        )
    engine.info_document = {"Driver": "overlay2", "DriverStatus": [["Backing Filesystem", "xfs"]]}
    return engine


@pytest.fixture
def executor_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(executor_process, "running", lambda paths: object())


@pytest.mark.usefixtures("executor_runs")
def test_a_guardian_of_this_user_on_127_0_0_1_passes(
    paths: CloisterPaths, instance: stack.Instance
) -> None:
    engine = guardian_engine(instance)
    checks = doctor.guardian_checks(engine.client, instance, paths, GlobalConfig())
    assert failed_ids(checks) == set()
    assert [check.id for check in checks] == [
        "engine.guardian",
        "engine.hub-published",
        "engine.disk-quota",
    ]


@pytest.mark.usefixtures("executor_runs")
def test_a_hub_on_every_address_fails(paths: CloisterPaths, instance: stack.Instance) -> None:
    engine = guardian_engine(instance, host_ip="0.0.0.0")
    checks = doctor.guardian_checks(engine.client, instance, paths, GlobalConfig())
    assert failed_ids(checks) == {"engine.hub-published"}


@pytest.mark.usefixtures("executor_runs")
def test_a_stopped_or_foreign_guardian_fails(
    paths: CloisterPaths, instance: stack.Instance
) -> None:
    engine = guardian_engine(instance)
    engine.containers.by_name[instance.service("proxy")].status = "exited"
    engine.containers.by_name[instance.service("gateway")].labels[stack.LABEL_OWNER] = "0"
    (guardian, *_) = doctor.guardian_checks(engine.client, instance, paths, GlobalConfig())
    assert not guardian.passed
    assert "proxy is exited" in guardian.evidence
    assert "is not this user's" in guardian.evidence


def test_the_disk_quota_fails_only_when_asked_for_and_not_enforceable() -> None:
    extfs = {"Driver": "overlay2", "DriverStatus": [["Backing Filesystem", "extfs"]]}
    xfs = {"Driver": "overlay2", "DriverStatus": [["Backing Filesystem", "xfs"]]}
    none_asked = doctor.disk_check(GlobalConfig(), lambda: extfs)
    assert none_asked.passed
    assert "could not enforce one" in none_asked.evidence
    asked = GlobalConfig.model_validate({"defaults": {"disk": "10g"}})
    assert not doctor.disk_check(asked, lambda: extfs).passed
    assert doctor.disk_check(asked, lambda: xfs).passed


# -- the command -----------------------------------------------------------------------------


def report(*failed: str) -> Report:
    checks = tuple(Check.of(check_id, check_id not in failed, "seen") for check_id in CHECKS)
    return Report(CLOISTER, f"cloister-x-{CLOISTER}", checks, 1.5)


def invoke(monkeypatch: pytest.MonkeyPatch, found: Report, *args: str) -> Any:
    asked: list[str | None] = []

    def audit(paths: CloisterPaths, given: str | None, directory: Path) -> Report:
        asked.append(given)
        return found

    monkeypatch.setattr(doctor, "audit", audit)
    result = CliRunner().invoke(doctor_command, list(args), env={"COLUMNS": "200"})
    assert asked == [next((arg for arg in args if not arg.startswith("-")), None)]
    return result


def test_a_sealed_cloister_prints_every_check_and_exits_0(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    result = invoke(monkeypatch, report())
    assert result.exit_code == 0, result.output
    assert result.output.count("pass") >= len(CHECKS)
    assert "FAIL" not in result.output
    assert f"all {len(CHECKS)} checks passed" in result.output


def test_a_failure_says_what_it_means_and_how_to_fix_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    result = invoke(monkeypatch, report("engine.attached"), CLOISTER)
    assert result.exit_code == 1
    about = CHECKS["engine.attached"]
    assert "FAIL engine.attached" in result.output
    assert about.meaning in result.output
    assert about.fix in result.output
    assert f"1 of {len(CHECKS)} checks failed" in result.output


def test_json_holds_every_check(monkeypatch: pytest.MonkeyPatch) -> None:
    result = invoke(monkeypatch, report("egress.dns"), "--json")
    assert result.exit_code == 1
    document = json.loads(result.stdout)
    assert document["passed"] is False
    assert document["cloister"] == CLOISTER
    by_id = {check["id"]: check for check in document["checks"]}
    assert set(by_id) == set(CHECKS)
    assert by_id["egress.dns"]["passed"] is False
    assert set(by_id["egress.dns"]) == {
        "id", "family", "title", "passed", "meaning", "fix", "evidence", "source"
    }  # fmt: skip
    assert by_id["egress.dns"]["source"] == "network"
    assert by_id["engine.attached"]["source"] == "engine"


def info(name: str, path: str, status: str = "running") -> SimpleNamespace:
    return SimpleNamespace(name=name, path=path, status=status)


def test_the_cloister_is_this_directorys_else_the_only_one_running(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, instance: stack.Instance
) -> None:
    running = [info("a", str(tmp_path / "a")), info("b", str(tmp_path / "b"), "exited")]
    monkeypatch.setattr(listing, "list_cloisters", lambda client, instance: running)
    (tmp_path / "a" / "src").mkdir(parents=True)
    assert doctor.choose(None, instance, None, tmp_path / "a" / "src") == "a"  # type: ignore[arg-type]
    assert doctor.choose(None, instance, None, tmp_path) == "a"  # type: ignore[arg-type]
    assert doctor.choose(None, instance, "b", tmp_path) == "b"  # type: ignore[arg-type]
    running.append(info("c", str(tmp_path / "c")))
    with pytest.raises(doctor.DoctorError, match="name one of a, c"):
        doctor.choose(None, instance, None, tmp_path)  # type: ignore[arg-type]


# -- once per engine, at a start ---------------------------------------------------------------


class Probes:
    """Stands in for the probe: answers *checks*, counting its runs."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, *failed: str) -> None:
        self.runs = 0
        self.failed = failed
        monkeypatch.setattr(doctor, "probe", self)
        monkeypatch.setattr(doctor, "running_container", lambda client, instance, name: None)

    def __call__(self, *arguments: Any, checks: tuple[str, ...]) -> list[Check]:
        self.runs += 1
        return [Check.of(each, each not in self.failed, "seen") for each in checks]


def engine_with_id(engine_id: str) -> Any:
    return SimpleNamespace(info=lambda: {"ID": engine_id})


def test_a_new_engine_is_checked_once_and_remembered(
    monkeypatch: pytest.MonkeyPatch, paths: CloisterPaths, instance: stack.Instance
) -> None:
    probes = Probes(monkeypatch)
    config = GlobalConfig()
    assert doctor.check_new_engine(engine_with_id("AAA"), instance, paths, config, CLOISTER) == []
    assert doctor.check_new_engine(engine_with_id("AAA"), instance, paths, config, CLOISTER) == []
    assert probes.runs == 1
    assert set(doctor.EngineRecord.read(paths).engines) == {"AAA"}
    doctor.check_new_engine(engine_with_id("BBB"), instance, paths, config, CLOISTER)
    assert probes.runs == 2
    assert set(doctor.EngineRecord.read(paths).engines) == {"AAA", "BBB"}


def test_an_engine_that_fails_is_not_remembered(
    monkeypatch: pytest.MonkeyPatch, paths: CloisterPaths, instance: stack.Instance
) -> None:
    probes = Probes(monkeypatch, "egress.tcp")
    config = GlobalConfig()
    failed = doctor.check_new_engine(engine_with_id("AAA"), instance, paths, config, CLOISTER)
    assert [check.id for check in failed] == ["egress.tcp"]
    doctor.check_new_engine(engine_with_id("AAA"), instance, paths, config, CLOISTER)
    assert probes.runs == 2  # asked again at the next start
    assert doctor.EngineRecord.read(paths).engines == {}


def test_an_id_already_asked_is_used_rather_than_asked_again(
    monkeypatch: pytest.MonkeyPatch, paths: CloisterPaths, instance: stack.Instance
) -> None:
    probes = Probes(monkeypatch)
    config = GlobalConfig()
    asked: Future[str] = Future()
    asked.set_result("AAA")
    never = SimpleNamespace(info=lambda: pytest.fail("asked the engine again"))
    assert doctor.check_new_engine(never, instance, paths, config, CLOISTER, known_id=asked) == []
    assert probes.runs == 1
    assert set(doctor.EngineRecord.read(paths).engines) == {"AAA"}


def test_a_damaged_record_is_no_record(paths: CloisterPaths) -> None:
    paths.data_dir.mkdir(parents=True)
    (paths.data_dir / doctor.ENGINES_FILE).write_text("[not json", encoding="utf-8")
    assert doctor.EngineRecord.read(paths).engines == {}


def test_a_start_on_an_engine_that_fails_stops_the_cloister(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    failed = [Check.of("egress.tcp", False, "1.1.1.1:443: connected")]
    monkeypatch.setattr(doctor, "check_new_engine", lambda *arguments, **named: failed)
    stopped: list[str] = []
    monkeypatch.setattr(apply, "stop", lambda context, name: stopped.append(name))
    context = SimpleNamespace(docker=None, instance=None, paths=None, config=None)
    with pytest.raises(CloisterStartError) as raised:
        apply.check_engine(context, CLOISTER, [])  # type: ignore[arg-type]
    assert stopped == [CLOISTER]
    message = str(raised.value)
    assert "FAIL egress.tcp" in message
    assert "1.1.1.1:443: connected" in message
    assert "run `cloister doctor`" in message


def test_a_start_check_that_cannot_start_for_this_machine_is_a_warning(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def cannot(*arguments: Any, **named: Any) -> list[Check]:
        raise doctor.ProbeUnavailableError("the docker command is not installed")

    monkeypatch.setattr(doctor, "check_new_engine", cannot)
    monkeypatch.setattr(apply, "stop", lambda context, name: pytest.fail("stopped"))
    warnings: list[str] = []
    context = SimpleNamespace(docker=None, instance=None, paths=None, config=None)
    apply.check_engine(context, CLOISTER, warnings)  # type: ignore[arg-type]
    assert warnings == [
        "the start check of this engine could not run: the docker command is not installed"
    ]


@pytest.mark.parametrize(
    "error",
    [
        doctor.DoctorError("the probe did not finish within 20s"),
        UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte"),
        docker.errors.APIError("conflict"),
    ],
)
def test_a_start_check_that_breaks_otherwise_stops_the_cloister(
    monkeypatch: pytest.MonkeyPatch, error: Exception
) -> None:
    def breaks(*arguments: Any, **named: Any) -> list[Check]:
        raise error

    monkeypatch.setattr(doctor, "check_new_engine", breaks)
    stopped: list[str] = []
    monkeypatch.setattr(apply, "stop", lambda context, name: stopped.append(name))
    context = SimpleNamespace(docker=None, instance=None, paths=None, config=None)
    with pytest.raises(CloisterStartError, match="the start check of this engine failed") as raised:
        apply.check_engine(context, CLOISTER, [])  # type: ignore[arg-type]
    assert stopped == [CLOISTER]
    assert repr(error) in str(raised.value)
