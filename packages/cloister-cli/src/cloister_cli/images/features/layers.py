"""The build that installs a devcontainer's Features: one ``docker build`` on top of the
devcontainer's image, each Feature in its own layers, as root, in install order.

As the specification and the reference CLI do: the Feature's folder is copied in with
its ``devcontainer-features.env`` (its options, and ``_REMOTE_USER`` and the like), and
``install.sh`` runs from that folder with the file's variables exported. The Feature's
kept ``containerEnv`` is an ``ENV`` after it (so a later Feature's install sees it too;
``${PATH}`` in a value is expanded as Docker does).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from cloister_cli.images.features.resolve import FeaturePlan, Installed
from cloister_cli.images.projectimages.model import BASE_ARG, Build
from cloister_core.devcontainer.featureset import render_feature_env

INSIDE = "/tmp/cloister-features"  # noqa: S108 - a build-time directory of the image
ENV_FILE = "devcontainer-features.env"
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def feature_build(
    plan: FeaturePlan, *, remote_user: str | None, home: str, as_root: bool = True
) -> Build:
    """The build installing *plan*'s Features (all of them resolved); *as_root*: the
    image before may end as another user (``USER root`` first: a step less when not)."""
    user = remote_user or "root"
    user_home = home if remote_user else "/root"
    lines = [
        "# Dev container Features: each installed as root in its own layers.",
        f"ARG {BASE_ARG}",
        f"FROM ${{{BASE_ARG}}}",
        *(["USER root"] if as_root else []),
        # Their folders in one step: each build step costs the classic builder a commit.
        f"COPY features {INSIDE}",
    ]
    folders = []
    generated = []
    for number, item in enumerate(plan.installs, start=1):
        assert item.resolved is not None  # noqa: S101 - planned
        assert item.folder is not None  # noqa: S101 - planned
        name = f"features/{number}"
        folders.append((name, item.folder, item.entries))
        env = render_feature_env(
            item.resolved.metadata,
            item.feature.options,
            remote_user=user,
            container_user="root",
            remote_user_home=user_home,
            container_user_home="/root",
        )
        generated.append((f"{name}/{ENV_FILE}", env.encode()))
        target = f"{INSIDE}/{number}"
        lines += [
            f"# {number}. {_comment(item.feature.id)} ({item.resolved.digest})",
            f"RUN cd {target} && chmod +x ./install.sh && set -a && . ./{ENV_FILE} && set +a"
            " && ./install.sh",
        ]
        lines += _env_lines(item.container_env)
    return Build(
        "the Features",
        ("\n".join(lines) + "\n").encode(),
        None,
        (),
        generated=tuple(generated),
        folders=tuple(folders),
        chained=True,
    )


def step_lines(installs: tuple[Installed, ...]) -> list[str]:
    """For people: one line per Feature installed."""
    return [f"install Feature {item.feature.id} ({item.resolved_as}) as root" for item in installs]


def _env_lines(environment: Mapping[str, str]) -> list[str]:
    # One ENV per Feature (a later Feature's `PATH=…:${PATH}` must see this one's). The
    # override rules kept only sensible names; a value with a control character cannot
    # be an ENV line. In double quotes only \ and " need a backslash.
    pairs = [
        f'{name}="{_quoted(value)}"'
        for name, value in environment.items()
        if _NAME.match(name) and value.isprintable()
    ]
    return [f"ENV {' '.join(pairs)}"] if pairs else []


def _quoted(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


def _comment(text: str) -> str:
    return "".join(character if character.isprintable() else "?" for character in text)
