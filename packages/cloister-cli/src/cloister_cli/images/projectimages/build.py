"""The build chain: each ``docker build`` of a plan with the classic builder, in order,
from a context Cloister assembled, streamed to a progress callback; a failing step's
header and last lines of output are in the error
(:class:`cloister_cli.images.builds.BuildOutput`)."""

from __future__ import annotations

import tempfile

import docker.errors

from cloister_cli.container.engine import Engine
from cloister_cli.images.builds import BuildOutput
from cloister_cli.images.projectimages.context import context_tar
from cloister_cli.images.projectimages.model import (
    BASE_ARG,
    DOCKERFILE_NAME,
    KEY_LABEL,
    PROJECT_LABEL,
    Build,
    ImagePlan,
    Progress,
    ProjectImageError,
)


def build_chain(client: Engine, plan: ImagePlan, progress: Progress, *, no_cache: bool) -> str:
    """Run the plan's builds in order; the final image's ID (tagged and labelled)."""
    assert plan.key is not None  # noqa: S101 - only called for a plan that builds
    image = plan.start
    for index, build in enumerate(plan.builds):
        last = index == len(plan.builds) - 1
        args = dict(build.args)
        if build.chained:
            if image is None:
                raise ProjectImageError(f"{build.what}: nothing to build on")
            args[BASE_ARG] = image
        image = _build_one(
            client,
            build,
            args,
            progress=progress,
            shown=f"{plan.tag} ({build.what})",
            tag=plan.tag if last else None,
            labels={KEY_LABEL: plan.key, PROJECT_LABEL: plan.project} if last else None,
            no_cache=no_cache,
        )
    if image is None:
        raise ProjectImageError(f"{plan.tag}: nothing was built")
    return image


def _build_one(
    client: Engine,
    build: Build,
    args: dict[str, str],
    *,
    progress: Progress,
    shown: str,
    tag: str | None,
    labels: dict[str, str] | None,
    no_cache: bool,
) -> str:
    """One classic-builder build from a context Cloister assembled; the image's ID."""
    output = BuildOutput(lambda line: progress(shown, line))
    with tempfile.TemporaryFile(prefix="cloister-context-") as context:
        context_tar(build, context)
        try:
            output.read(
                client.api.build(
                    fileobj=context,
                    custom_context=True,
                    dockerfile=DOCKERFILE_NAME,
                    buildargs=args,
                    target=build.target,
                    tag=tag,
                    labels=labels,
                    nocache=no_cache,
                    rm=True,
                    forcerm=True,
                    pull=False,
                    decode=True,
                )
            )
        except docker.errors.APIError as error:
            raise ProjectImageError(
                f"building {build.what}: {error.explanation or error}"
            ) from None
    if output.error is not None:
        raise ProjectImageError(f"building {build.what}: {output.error}")
    if output.image is None:
        raise ProjectImageError(f"building {build.what}: the builder named no image")
    return output.image
