"""A project's own image: the devcontainer's, the cloister layer, Features, .cloister/Dockerfile.

What ``cloister start`` runs, in order:

1. the devcontainer's ``image`` (it must be on this machine: Cloister pulls nothing) or
   the ``docker build`` of its Dockerfile (context, ``args``, ``target``); without a
   devcontainer, the base image (Cloister's agent image, ``defaults.image``);
2. after a devcontainer only, *the cloister layer*: the ``hostexec`` client at
   ``/usr/local/bin/hostexec`` and an empty ``/work``, nothing else (two ``COPY``
   instructions, so an image without a shell takes it too; before the Features, so
   Docker's cache has it whatever the Features are);
3. the devcontainer's Features, if any, in one build on top of that: each installed as
   root in its own layers, in install order (:mod:`cloister_cli.images.features.layers`;
   resolved, fetched and locked beforehand by :mod:`cloister_cli.images.features.resolve`);
4. ``.cloister/Dockerfile`` of the project, if there is one, built on top of that with
   ``--build-arg CLOISTER_BASE=<the image so far>`` and ``.cloister/`` as its context.

Without a devcontainer and ``.cloister/Dockerfile`` the base image runs as it is and
nothing is built. Otherwise the result is ``cloister-project-<project>:<key[:12]>``,
where the key is a sha256 over every input: the devcontainer.json, the Dockerfiles,
each Feature's digest, options and place in the order,
each file of each build context (name, mode, content; ``.git`` and what
``.dockerignore`` excludes are left out, of the hash *and* of what is sent to Docker,
so both are the same set), the build arguments and target, the IDs of the images it
starts from, and the cloister layer. An image with that key is reused; any change
makes a new one. The Features' lock file a first start writes before it builds is in a
build context when the context holds it: the plan hashes it as it will be written (the
``overlay`` of ``plan_project_image``), so a dry run shows the tag the start builds.
``<data>/cache/images/<project>.json`` records the project's current key, which
``cloister images prune`` keeps.

The project is the agent's to write, so its files are read as hostile: nothing is
followed through a symbolic link (a link is hashed and sent as a link, as Docker
does), only regular files are opened, and ``.cloister/Dockerfile`` must be a regular
file. Builds use the classic builder (no BuildKit), streamed to a progress callback; a
failing step's ``Step N/M`` line and last 40 lines of output are in the error. Cloister's
agent images end as root, so a Dockerfile's ``RUN`` steps on one run as root; what the
cloister runs as is not the image's ``USER`` but the host user's uid:gid, always.

The package is split by concern: :mod:`.model` (constants, the error, the plan),
:mod:`.context` (reading the project as hostile, the context sent to Docker),
:mod:`.plan` (the key and the steps; ``ensure_project_image``), :mod:`.build` (the
build chain) and :mod:`.store` (the record, listing and pruning).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cloister_core.lazyexports import lazy_exports

if TYPE_CHECKING:
    from cloister_cli.images.projectimages.model import (
        BASE_ARG,
        CLOISTER_LAYER,
        HOSTEXEC_SOURCE,
        KEY_LABEL,
        PROJECT_DOCKERFILE,
        PROJECT_LABEL,
        RECIPE_VERSION,
        TAG_PREFIX,
        ImagePlan,
        Progress,
        ProjectImageError,
        project_tag,
    )
    from cloister_cli.images.projectimages.plan import (
        ensure_project_image,
        plan_project_image,
    )
    from cloister_cli.images.projectimages.store import (
        ProjectImage,
        Prunable,
        Removal,
        list_project_images,
        prunable,
        prune_project_images,
        read_record,
        record_path,
    )

__all__ = [
    "BASE_ARG",
    "CLOISTER_LAYER",
    "HOSTEXEC_SOURCE",
    "KEY_LABEL",
    "PROJECT_DOCKERFILE",
    "PROJECT_LABEL",
    "RECIPE_VERSION",
    "TAG_PREFIX",
    "ImagePlan",
    "Progress",
    "ProjectImage",
    "ProjectImageError",
    "Prunable",
    "Removal",
    "ensure_project_image",
    "list_project_images",
    "plan_project_image",
    "project_tag",
    "prunable",
    "prune_project_images",
    "read_record",
    "record_path",
]

# Each name from its module, imported when first used: `cloister images list` needs
# the store only, not the devcontainer and config parsers that planning loads.
_HOMES = {
    "BASE_ARG": "model",
    "CLOISTER_LAYER": "model",
    "HOSTEXEC_SOURCE": "model",
    "KEY_LABEL": "model",
    "PROJECT_DOCKERFILE": "model",
    "PROJECT_LABEL": "model",
    "RECIPE_VERSION": "model",
    "TAG_PREFIX": "model",
    "ImagePlan": "model",
    "Progress": "model",
    "ProjectImageError": "model",
    "project_tag": "model",
    "ensure_project_image": "plan",
    "plan_project_image": "plan",
    "ProjectImage": "store",
    "Prunable": "store",
    "Removal": "store",
    "list_project_images": "store",
    "prunable": "store",
    "prune_project_images": "store",
    "read_record": "store",
    "record_path": "store",
}


__getattr__ = lazy_exports(__name__, _HOMES)
