"""What a loaded devcontainer.json adds to the container plan: mounts with their options,
and the checks the plan makes on what the loader kept."""

from __future__ import annotations

from pathlib import Path

from cloister_cli.container import devoverrides
from cloister_core.devcontainer import MountSpec, load_devcontainer
from tests.cli.start.test_dryrun import plan_for
from tests.git_support import make_repo


def test_harmless_mount_options_reach_docker() -> None:
    tmpfs = MountSpec("tmpfs", None, "/t", False, tmpfs_size=64 * 1024**2, tmpfs_mode=0o1777)
    assert devoverrides.mount_for(tmpfs, "api")["TmpfsOptions"] == {
        "SizeBytes": 64 * 1024**2,
        "Mode": 0o1777,
    }
    volume = devoverrides.mount_for(MountSpec("volume", "c", "/c", False, no_copy=True), "api")
    assert volume["VolumeOptions"] == {"NoCopy": True}
    assert volume["Source"] == devoverrides.volume_name("api", "c")
    plain = devoverrides.mount_for(MountSpec("tmpfs", None, "/t", False), "api")
    assert "TmpfsOptions" not in plain


def test_a_target_spelled_to_slip_past_the_checks_is_still_cloisters(tmp_path: Path) -> None:
    """``//home/cloister`` is ``/home/cloister``: normalised by the loader, it meets the
    plan's check that no devcontainer mount covers one of Cloister's."""
    repo = make_repo(tmp_path / "api")
    path = repo / ".devcontainer" / "devcontainer.json"
    path.parent.mkdir()
    path.write_text(
        '{"image": "x", "mounts": ["source=a,target=//home/cloister,type=volume",'
        ' "type=tmpfs,target=/etc/./passwd/", "source=b,target=//work/,type=volume"]}'
    )
    devcontainer = load_devcontainer(path, project_root=repo, home=tmp_path / "home", environ={})
    assert [mount.target for mount in devcontainer.mounts] == ["/home/cloister", "/etc/passwd"]
    dropped = [item for item in devcontainer.overrides if item.field == "mounts[2]"]
    assert "would hide the project at /work" in dropped[0].why
    extras, _ = devoverrides.extras_for(devcontainer, project="api", image_env=None)
    plan, _ = plan_for(tmp_path, repo, extras)
    assert "mount on /home/cloister dropped: it would cover Cloister's own /home/cloister" in (
        plan.notes
    )
    assert "mount on /etc/passwd dropped: it would cover Cloister's own /etc/passwd" in plan.notes
    assert not any(mount["Source"] == devoverrides.volume_name("api", "a") for mount in plan.mounts)
