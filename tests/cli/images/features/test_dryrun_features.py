"""What ``cloister start --dry-run`` shows of the Features: in install order, each with
its digest and state, its options' variables, its ENV and its notes; and the same for
scripts (``--json``)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, cast

from cloister_cli.images.features.resolve import Context, plan_features
from cloister_cli.start import dryrun
from cloister_core.devcontainer import Devcontainer, Feature, ImageSource
from cloister_core.paths import CloisterPaths
from tests.cli.images.features.conftest import make_feature
from tests.registry import FakeRegistry

if TYPE_CHECKING:
    from cloister_cli.start.plan import StartPlan


def test_the_dry_run_lists_the_features_in_install_order(
    tmp_path: Path, registry: FakeRegistry
) -> None:
    root = tmp_path / "project"
    folder = make_feature(
        tmp_path / "x",
        "x",
        options={"api_token": {"type": "string", "default": ""}, "v": {"type": "string"}},
        containerEnv={"X_HOME": "/opt/x"},
    )
    digest = registry.publish("f/x", folder, "1")
    local = make_feature(root / ".devcontainer" / "mine", "mine")
    path = root / ".devcontainer" / "devcontainer.json"
    path.write_text("{}")
    devcontainer = Devcontainer(
        path=path,
        name=None,
        source=ImageSource("image", image="debian:bookworm-slim"),
        features=(
            Feature(f"{registry.host}/f/x:1", {"v": "2", "api_token": "s3cret"}, True, "oci"),
            Feature("./mine", {}, True, "local", local_path=local),
            Feature("127.0.0.1:9/f/gone:1", {}, True, "oci"),
        ),
        mounts=(),
        run_args=(),
        container_env={},
        remote_env={},
        user=None,
        lifecycle=(),
        overrides=(),
    )
    context = Context(
        paths=CloisterPaths(config_dir=tmp_path / "c", data_dir=tmp_path / "d"),
        project_root=root,
        home=tmp_path / "home",
        environ={},
    )
    plan = plan_features(context, devcontainer, dry_run=True)
    preview = cast("StartPlan", SimpleNamespace(features=plan, secret="tok"))
    lines = [line.strip() for line in dryrun._features_lines(preview)]
    shown = "\n".join(lines)
    assert lines[0].startswith("features   in install order")
    assert f"{registry.host}/f/x:1 {digest} (fetched now, into the cache)" in shown
    assert f"resolved  {registry.host}/f/x@{digest}" in shown
    assert "option    V=2" in shown
    assert "option    API_TOKEN=***" in shown  # a secret-looking option is masked
    assert "ENV       X_HOME=/opt/x" in shown
    assert "(local)" in shown
    assert "127.0.0.1:9/f/gone:1 (not fetched)" in shown
    assert "note      not fetched: cannot fetch Feature 127.0.0.1:9/f/gone" in shown
    assert lines[-1] == "`cloister start` would write the lock file (the new pins above)"
    assert "(but Features fetched into Cloister's cache)" in dryrun.header(preview)
    again = plan_features(context, devcontainer, dry_run=True)
    cached = cast("StartPlan", SimpleNamespace(features=again, secret="tok"))
    assert dryrun.header(cached).endswith("nothing was built, written or started")
    assert not path.with_name("devcontainer-lock.json").exists()

    scripted = dryrun._features_json(preview)
    assert scripted is not None
    first = next(item for item in scripted if item["kind"] == "oci")
    assert (first["digest"], first["state"], first["container_env"]) == (
        digest,
        "fetched now, into the cache",
        {"X_HOME": "/opt/x"},
    )
    assert scripted[-1]["state"] == "not fetched"
