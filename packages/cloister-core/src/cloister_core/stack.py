"""The guardian stack's names, ports, aliases and labels, in one place.

The CLI renders the compose template with these values and gives cloisters the
addresses below; the services take their default ports from here. Changing a name
here changes it everywhere.

One engine may run several guardians: one per *instance*, a user (uid) and a data
directory (:class:`Instance`). Everything engine-global (the compose project, the
containers, the networks) is named after the instance's id, and carries its labels,
so two users, or a test suite, never take over each other's stack.

Each cloister is alone on an internal network of its own, where only its instance's
proxy, hostexec gateway and credential gateway are with it. Their DNS aliases there
are fixed (aliases are per network); what else resolves on that network is the
cloister's own container and the services' containers, ``cloister-<id>-guardian-...``:
cloister names starting with ``guardian`` are refused
(:data:`cloister_core.names.RESERVED_CLOISTER_PREFIX`), so no cloister can answer for a
service and collect the others' tokens.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from cloister_core.names import validate_cloister_name

if TYPE_CHECKING:
    from cloister_core.paths import CloisterPaths

PREFIX = "cloister"  # every engine-global name starts with it
LEGACY_PROJECT = "cloister-guardian"  # the one fixed stack of Cloister before instances
LEGACY_NETWORKS = ("cloister-net", "cloister-egress", "cloister-control", "cloister-ports")

PROXY_ALIAS = "cloister-guardian-proxy"  # on each cloister's network
PROXY_PORT = 3128
HOSTEXEC_ALIAS = "cloister-guardian"  # the hostexec gateway, on each cloister's network
HOSTEXEC_PORT = 9998
CREDENTIALS_ALIAS = "cloister-guardian-credentials"  # the credential gateway, likewise
CREDENTIALS_PORT = 9997
APPROVAL_PORT = 9999  # the hub, inside the stack (its host port is guardian.ui_port)

SERVICES = ("proxy", "approval", "gateway", "credentials")
ALIASES = (PROXY_ALIAS, HOSTEXEC_ALIAS, CREDENTIALS_ALIAS)  # what cloisters resolve
# The services on a cloister's network, with the alias each answers to there.
CLOISTER_SERVICES = (
    ("proxy", PROXY_ALIAS),
    ("gateway", HOSTEXEC_ALIAS),
    ("credentials", CREDENTIALS_ALIAS),
)

LABEL_GUARDIAN = "org.cloister.guardian"
# On every container and network Cloister makes: whose it is.
LABEL_INSTANCE = "org.cloister.instance"  # Instance.id
LABEL_OWNER = "org.cloister.owner"  # the uid
LABEL_DATA_DIR = "org.cloister.data-dir"  # the resolved data directory
LABEL_CLOISTER = "org.cloister.cloister"
LABEL_PROJECT = "org.cloister.project"
LABEL_PATH = "org.cloister.path"
LABEL_BRANCH = "org.cloister.branch"
LABEL_GIT_COMMON_DIR = "org.cloister.git-common-dir"

# The throwaway containers that bring a cloister's commits back (`cloister sync`): the
# image with git and Cloister's export script, and the label naming the cloister.
GIT_IMAGE = "cloister-git:latest"
LABEL_SYNC = "org.cloister.sync"

# `cloister doctor`: its probe's sidecar container, the label naming the cloister probed.
LABEL_DOCTOR = "org.cloister.doctor"

# `cloister port`: a forwarder container per (cloister, port), on the cloister's network
# and the ports network, publishing FORWARDER_PORT on the host's 127.0.0.1 (a forwarder is
# not a cloister: it never carries LABEL_CLOISTER).
FORWARDER_PORT = 9996  # where it listens, inside its own container
LABEL_FORWARD = "org.cloister.forward"  # the cloister whose port it publishes
LABEL_FORWARD_PORT = "org.cloister.forward.port"  # that port, in the cloister
LABEL_FORWARD_TARGET = "org.cloister.forward.target"  # the cloister's address:port it joins
LABEL_FORWARD_CONTAINER = "org.cloister.forward.container"  # the cloister container's id
LABEL_FORWARD_SERVICE = "org.cloister.forward.service"  # the compose service, when not the cloister

# A compose devcontainer's other services (`runServices`), each a container beside its
# cloister (cloister_cli.container.services); like a forwarder, never carrying LABEL_CLOISTER.
LABEL_SERVICE_OF = "org.cloister.service-of"  # the cloister it runs beside
LABEL_SERVICE = "org.cloister.service"  # its name in the compose file
LABEL_SERVICE_CONTAINER = "org.cloister.service.container"  # the cloister container's id


def credentials_url(agent_prefix: str) -> str:
    """An agent's base URL on the gateway: ``http://cloister-guardian-credentials:9997/claude``."""
    return f"http://{CREDENTIALS_ALIAS}:{CREDENTIALS_PORT}{agent_prefix}"


@dataclass(frozen=True, slots=True)
class Instance:
    """One user's guardian on this engine: a uid and a resolved data directory.

    Its :attr:`id` (8 hex digits of a sha256) names everything it puts on the engine.
    """

    id: str
    uid: int
    data_dir: Path

    @classmethod
    def of(cls, paths: CloisterPaths, uid: int) -> Instance:
        data_dir = paths.data_dir.resolve()
        digest = hashlib.sha256(f"{uid}\0{data_dir}".encode()).hexdigest()
        return cls(digest[:8], uid, data_dir)

    @property
    def project(self) -> str:
        """The compose project: ``cloister-<id>``."""
        return f"{PREFIX}-{self.id}"

    @property
    def labels(self) -> dict[str, str]:
        """What every container and network of the instance carries."""
        return {
            LABEL_INSTANCE: self.id,
            LABEL_OWNER: str(self.uid),
            LABEL_DATA_DIR: str(self.data_dir),
        }

    @property
    def label_filter(self) -> str:
        """An engine ``label`` filter for the instance's objects."""
        return f"{LABEL_INSTANCE}={self.id}"

    def service(self, service: str) -> str:
        """A stack service's container: ``cloister-<id>-guardian-proxy``."""
        return f"{self.project}-guardian-{service}"

    def cloister(self, name: str) -> str:
        """Cloister *name*'s container, and its network: ``cloister-<id>-<name>``."""
        return f"{self.project}-{validate_cloister_name(name)}"

    def forwarder(self, cloister: str, port: int, service: str | None = None) -> str:
        """The forwarder of a cloister's port: ``cloister-<id>-guardian-port-my-api-8000``
        (``...-my-api-5432.db`` for the port of its compose service ``db``).

        In the guardian's namespace, which no cloister's name can enter; the port, which
        holds no ``-``, keeps the names of two (cloister, port) pairs apart.
        """
        name = f"{self.service('port')}-{cloister}-{port}"
        return name if service is None else f"{name}.{service}"

    def sidecar(self, cloister: str, service: str) -> str:
        """A compose service beside a cloister: ``cloister-<id>-guardian-svc-my-api.db``.

        In the guardian's namespace, like a forwarder: never a cloister's container or
        network name (``cloister-<id>-my-api-db`` could be cloister ``my-api-db``'s). A
        service name has no dot, so the last one tells cloister ``a-b``'s service ``c``
        from cloister ``a``'s service ``b-c``.
        """
        return f"{self.service('svc')}-{cloister}.{service}"

    def sync_prefix(self, cloister: str) -> str:
        """The start of a sync container's name (`cloister sync`'s export)."""
        return f"{self.service('sync')}-{cloister}"

    @property
    def egress_net(self) -> str:
        """To the internet: the proxy and the credential gateway."""
        return self.service("egress")

    @property
    def control_net(self) -> str:
        """The services among themselves and the approval hub."""
        return self.service("control")

    @property
    def ports_net(self) -> str:
        """Not internal (Docker publishes no port from an internal network), no IPv6,
        and no traffic between its containers: only `cloister port`'s forwarders."""
        return self.service("ports")
