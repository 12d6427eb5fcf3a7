"""The hub's image: built from this tree, non-root, healthy, guarded, deciding."""

from __future__ import annotations

import json
import secrets
import time
from pathlib import Path

import docker
import httpx
import pytest

from cloister_cli.images.builds import APPROVAL_IMAGE, assemble_context, build_image
from cloister_cli.images.sourcetree import find_workspace
from tests.waiting import free_port

pytestmark = pytest.mark.docker
TAG = "cloister-approval:test"
LABELS = {"org.cloister.test": "tests/approval/test_image.py"}


@pytest.fixture(scope="module")
def approval_image(
    docker_client: docker.DockerClient, tmp_path_factory: pytest.TempPathFactory
) -> str:
    workspace = find_workspace(Path(__file__).resolve().parent)
    context = assemble_context(
        workspace,
        APPROVAL_IMAGE,
        tmp_path_factory.mktemp("ctx") / "approval",
        docker_client.info()["Architecture"],
    )
    build_image(docker_client, context, TAG)
    return TAG


def test_hub_container(
    docker_client: docker.DockerClient, approval_image: str, tmp_path: Path
) -> None:
    config = tmp_path / "config"
    config.mkdir()
    config.chmod(0o777)  # the hub (uid 10001) writes decisions below it
    port = free_port()
    credential = secrets.token_hex(16)
    hub_secret = secrets.token_hex(32)
    container = docker_client.containers.run(
        approval_image,
        detach=True,
        labels=LABELS,
        volumes={str(config): {"bind": "/config", "mode": "rw"}},
        ports={"9999/tcp": ("127.0.0.1", port)},
        environment={
            "CLOISTER_APPROVAL_PUBLIC_HOSTS": json.dumps([f"127.0.0.1:{port}"]),
            "CLOISTER_APPROVAL_SERVICE_CREDENTIAL": credential,
            "CLOISTER_APPROVAL_HUB_SECRET": hub_secret,
        },
    )
    try:
        deadline = time.monotonic() + 30
        check = docker_client.images.get(approval_image).attrs["Config"]["Healthcheck"]["Test"]
        while container.exec_run(check[1:]).exit_code != 0:
            container.reload()
            assert container.status == "running", container.logs().decode()
            assert time.monotonic() < deadline, container.logs().decode()
            time.sleep(0.1)
        uid = container.exec_run(["id", "-u"]).output
        assert isinstance(uid, bytes)
        assert uid.strip() == b"10001"
        url = f"http://127.0.0.1:{port}"
        with httpx.Client(base_url=url, timeout=10) as anyone:
            # Only the human: the hub secret (or a browser session), health and the
            # page's data-free shell aside.
            refused = anyone.get("/api/v1/pending")
            assert refused.status_code == 401
            assert refused.headers["x-frame-options"] == "DENY"
            assert anyone.get("/fragments/pending").status_code == 401
            assert anyone.get("/").status_code == 200
            assert anyone.get("/api/v1/health").status_code == 200
        human = {"Authorization": f"Bearer {hub_secret}"}
        with httpx.Client(base_url=url, headers=human, timeout=10) as client:
            assert client.get("/").status_code == 200
            assert client.get("/", headers={"Host": "evil.example"}).status_code == 403
            held = client.post(
                "/api/v1/service/domains",
                json={"cloister": "c", "project": "p", "host": "x.test", "port": 443,
                      "wait_seconds": 0.2},
                headers={"Authorization": f"Bearer {credential}"},
            )  # fmt: skip
            assert held.json()["action"] == "timeout"
        image = docker_client.images.get(approval_image).attrs["Config"]
        assert image["User"] == "10001:10001"
        assert image["Healthcheck"]["Test"][:4] == [
            "CMD", "python3", "/opt/cloister/healthcheck.py", "/api/v1/health"
        ]  # fmt: skip
        # It says where it is; it made no secret of its own (it was given one).
        stderr = container.logs(stdout=False, stderr=True).decode()
        assert f"cloister-approval: http://127.0.0.1:{port}/" in stderr, stderr
        assert "log in" not in stderr
        logs = container.logs(stderr=False).decode().splitlines()
        events = [json.loads(line)["event"] for line in logs if line.startswith("{")]
        assert events == ["approval.domain.requested", "approval.domain.expired"]
    finally:
        container.remove(force=True)
