"""The stack's names: an instance's are its own, and no cloister can take a service's."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest

from cloister_core import stack
from cloister_core.errors import CloisterNameError
from cloister_core.names import validate_cloister_name
from cloister_core.paths import CloisterPaths


def _paths(tmp_path: Path, data: str = "data") -> CloisterPaths:
    return CloisterPaths(config_dir=tmp_path / "config", data_dir=tmp_path / data)


def test_an_instance_is_a_user_and_a_resolved_data_directory(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    instance = stack.Instance.of(_paths(tmp_path, "real"), 1000)
    expected = hashlib.sha256(f"1000\0{(tmp_path / 'real').resolve()}".encode()).hexdigest()
    assert instance.id == expected[:8]
    assert re.fullmatch(r"[0-9a-f]{8}", instance.id)
    # The same directory by another way is the same instance; another user's is not.
    assert stack.Instance.of(_paths(tmp_path, "link"), 1000) == instance
    assert stack.Instance.of(_paths(tmp_path, "real"), 1001).id != instance.id
    assert stack.Instance.of(_paths(tmp_path, "other"), 1000).id != instance.id


def test_every_engine_name_carries_the_id() -> None:
    instance = stack.Instance("0123abcd", 1000, Path("/home/me/.local/share/cloister"))
    assert instance.project == "cloister-0123abcd"
    assert instance.service("proxy") == "cloister-0123abcd-guardian-proxy"
    assert instance.cloister("my-api") == "cloister-0123abcd-my-api"
    assert instance.forwarder("my-api", 8000) == "cloister-0123abcd-guardian-port-my-api-8000"
    assert instance.sync_prefix("my-api") == "cloister-0123abcd-guardian-sync-my-api"
    assert instance.egress_net == "cloister-0123abcd-guardian-egress"
    assert instance.control_net == "cloister-0123abcd-guardian-control"
    assert instance.ports_net == "cloister-0123abcd-guardian-ports"
    assert instance.labels == {
        stack.LABEL_INSTANCE: "0123abcd",
        stack.LABEL_OWNER: "1000",
        stack.LABEL_DATA_DIR: "/home/me/.local/share/cloister",
    }
    assert instance.label_filter == "org.cloister.instance=0123abcd"
    with pytest.raises(CloisterNameError, match="reserved"):
        instance.cloister("guardian-proxy")


INSTANCE = stack.Instance("0123abcd", 0, Path("/d"))


@pytest.mark.parametrize(
    ("name", "prefix"),
    [
        # What a cloister's container would be called to answer for an alias...
        *((alias, f"{stack.PREFIX}-") for alias in stack.ALIASES),
        # ...or for a service's container, on a cloister's network.
        *((INSTANCE.service(service), f"{INSTANCE.project}-") for service in stack.SERVICES),
    ],
)
def test_no_cloister_can_be_named_like_a_service(name: str, prefix: str) -> None:
    # A project called "guardian-proxy" must not answer for the proxy (and collect
    # every cloister's token).
    assert name.startswith(prefix)
    with pytest.raises(CloisterNameError, match="reserved"):
        validate_cloister_name(name.removeprefix(prefix))


def test_addresses() -> None:
    assert stack.credentials_url("/claude") == "http://cloister-guardian-credentials:9997/claude"
    assert {alias for _, alias in stack.CLOISTER_SERVICES} == set(stack.ALIASES)
    assert {service for service, _ in stack.CLOISTER_SERVICES} < set(stack.SERVICES)


def test_the_sync_containers_names() -> None:
    # The throwaway export containers carry their own label, never a cloister's.
    assert stack.LABEL_SYNC.startswith("org.cloister.")
    assert stack.LABEL_SYNC not in {stack.LABEL_CLOISTER, stack.LABEL_PROJECT}
    assert stack.GIT_IMAGE.startswith("cloister-git")
    assert ":" in stack.GIT_IMAGE  # a tag: never whatever "latest" a registry has


def test_a_sidecar_name_tells_apart_where_the_cloister_name_ends() -> None:
    instance = stack.Instance("0123abcd", 1000, Path("/home/me/.local/share/cloister"))
    assert instance.sidecar("a-b", "c") != instance.sidecar("a", "b-c")
    assert instance.sidecar("my-api", "db") == "cloister-0123abcd-guardian-svc-my-api.db"
