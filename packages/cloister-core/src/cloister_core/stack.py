"""The guardian stack's names, ports, aliases and labels, in one place.

The CLI renders the compose template with these values and gives cloisters the
addresses below; the services take their default ports from here. Changing a name
here changes it everywhere.

Every name a cloister resolves on cloister-net is ``cloister-guardian`` or starts with
``cloister-guardian-``: a cloister's own container (``cloister-<name>``) is a DNS name on
that network too, and cloister names starting with ``guardian`` are refused
(:data:`cloister_core.names.RESERVED_CLOISTER_PREFIX`), so no cloister can answer for a
service and collect the others' tokens.
"""

from __future__ import annotations

PROJECT = "cloister-guardian"  # the compose project; containers are <project>-<service>

CLOISTER_NET = "cloister-net"  # internal: cloisters and the services they may reach
EGRESS_NET = "cloister-egress"  # to the internet: the proxy and the credential gateway
CONTROL_NET = "cloister-control"  # the services among themselves and the approval hub
# Not internal (Docker publishes no port from an internal network), no IPv6, and no
# traffic between its containers: only `cloister port`'s forwarders are on it.
PORTS_NET = "cloister-ports"

PROXY_ALIAS = f"{PROJECT}-proxy"  # on cloister-net (also the container's name)
PROXY_PORT = 3128
HOSTEXEC_ALIAS = PROJECT  # the hostexec gateway, on cloister-net
HOSTEXEC_PORT = 9998
CREDENTIALS_ALIAS = f"{PROJECT}-credentials"  # the credential gateway, on cloister-net
CREDENTIALS_PORT = 9997
APPROVAL_PORT = 9999  # the hub, inside the stack (its host port is guardian.ui_port)

SERVICES = ("proxy", "approval", "gateway", "credentials")
ALIASES = (PROXY_ALIAS, HOSTEXEC_ALIAS, CREDENTIALS_ALIAS)  # what cloisters resolve

LABEL_GUARDIAN = "org.cloister.guardian"
LABEL_CLOISTER = "org.cloister.cloister"
LABEL_PROJECT = "org.cloister.project"
LABEL_PATH = "org.cloister.path"
LABEL_BRANCH = "org.cloister.branch"
LABEL_GIT_COMMON_DIR = "org.cloister.git-common-dir"

# The throwaway containers that bring a cloister's commits back (`cloister sync`): the
# image with git and Cloister's export script, and the label naming the cloister.
GIT_IMAGE = "cloister-git:latest"
LABEL_SYNC = "org.cloister.sync"

# `cloister port`: a forwarder container per (cloister, port), on cloister-net and the
# ports network, publishing FORWARDER_PORT on the host's 127.0.0.1 (a forwarder is not a
# cloister: it never carries LABEL_CLOISTER).
FORWARDER_PORT = 9996  # where it listens, inside its own container
LABEL_FORWARD = "org.cloister.forward"  # the cloister whose port it publishes
LABEL_FORWARD_PORT = "org.cloister.forward.port"  # that port, in the cloister
LABEL_FORWARD_TARGET = "org.cloister.forward.target"  # the cloister's address:port it joins
LABEL_FORWARD_CONTAINER = "org.cloister.forward.container"  # the cloister container's id


def container(service: str) -> str:
    """The container of a stack service: ``cloister-guardian-proxy``."""
    return f"{PROJECT}-{service}"


def forwarder(cloister: str, port: int) -> str:
    """The forwarder of a cloister's port: ``cloister-guardian-port-my-api-8000``.

    In the guardian's namespace, which no cloister's name can enter (see above); the
    port, which holds no ``-``, keeps the names of two (cloister, port) pairs apart.
    """
    return f"{PROJECT}-port-{cloister}-{port}"


def credentials_url(agent_prefix: str) -> str:
    """An agent's base URL on the gateway: ``http://cloister-guardian-credentials:9997/claude``."""
    return f"http://{CREDENTIALS_ALIAS}:{CREDENTIALS_PORT}{agent_prefix}"
