"""``${localEnv:HOME}``, ``${localWorkspaceFolder}`` and the other variables of the spec.

A devcontainer.json lives in the project, and the agent writes the project: whatever
the file says at the next ``cloister start`` may be the agent's. So a host variable is
read only if its name does not look like a credential (``GITHUB_TOKEN``,
``AWS_SECRET_ACCESS_KEY``, ``SSH_AUTH_SOCK``…) or a URL that may carry one
(``DATABASE_URL``, ``SENTRY_DSN``, ``HTTPS_PROXY``, ``PIP_INDEX_URL``, ``UV_*``,
``NPM_*``): otherwise a planted ``"containerEnv": {"X": "${localEnv:GITHUB_TOKEN}"}``
would hand it to the agent. The
names are a heuristic; what the CLI passes as the environment is the real boundary.

``${devcontainerId}`` is the spec's stable id of one dev container: computed as the
reference implementation does, from the project's folder and the file's path
(:func:`devcontainer_id`), so a ``cache-${devcontainerId}`` volume is the same at each
start.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
import re
from collections.abc import Mapping
from dataclasses import dataclass

_VARIABLE = re.compile(r"\$\{([^{}]*)\}")
_SECRET_WORD = re.compile(
    r"TOKEN|SECRET|PASSW|PASSPHRASE|CREDENTIAL|AUTH|COOKIE|SESSION|PRIVATE|SOCK"
    r"|APIKEY|(?:^|_)KEYS?(?:_|$)"
    # URL-ish carriers of credentials: https://user:pass@host, a database DSN, a proxy.
    r"|(?:^|_)(?:URLS?|URIS?|DSN)$|PROXY",
    re.IGNORECASE,
)
_SECRET_PREFIXES = (
    "ANTHROPIC_",
    "AWS_",
    "AZURE_",
    "CLOISTER_",
    "CLOUDSDK_",
    "DOCKER_",
    "GCP_",
    "GEMINI_",
    "GH_",
    "GITHUB_",
    "GITLAB_",
    "GOOGLE_",
    "GPG_",
    "KUBE",
    "NPM_",
    "OPENAI_",
    "PIP_",
    "PYPI_",
    "SSH_",
    "TWINE_",
    "UV_",
    "VAULT_",
)


def looks_secret(name: str) -> bool:
    """Whether a host environment variable's name suggests a credential or a socket."""
    return bool(_SECRET_WORD.search(name)) or name.upper().startswith(_SECRET_PREFIXES)


def secret_reason(name: str) -> str:
    """Why a value that reads the host variable *name* is refused."""
    return (
        f"it reads ${{localEnv:{name}}}, which looks like a secret;"
        " Cloister does not pass host secrets in"
    )


_BASE32 = "0123456789abcdefghijklmnopqrstuv"


def devcontainer_id(local_folder: str, config_file: str) -> str:
    """The spec's ``${devcontainerId}``: 52 base-32 digits of the sha256 of the id labels.

    The reference CLI labels a dev container with ``devcontainer.local_folder`` and
    ``devcontainer.config_file`` and hashes their JSON (keys sorted, no spaces); the
    digest, read as one number, is written in base 32 (``0-9a-v``), zero-padded to 52.
    """
    labels = {"devcontainer.config_file": config_file, "devcontainer.local_folder": local_folder}
    text = json.dumps(labels, ensure_ascii=False, separators=(",", ":"), sort_keys=True)
    number = int.from_bytes(hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest())
    digits = []
    while number:
        number, digit = divmod(number, 32)
        digits.append(_BASE32[digit])
    return "".join(reversed(digits)).rjust(52, "0")


@dataclass(frozen=True, slots=True)
class Substituted:
    """A value after substitution, and what it read on the way."""

    text: str
    secrets: tuple[str, ...] = ()  # host variables not read: their names look secret
    unknown: tuple[str, ...] = ()  # variables Cloister does not substitute (left as written)


@dataclass(frozen=True, slots=True)
class Variables:
    """The values the spec's variables take for one cloister."""

    environ: Mapping[str, str]
    local_workspace: str
    container_workspace: str
    devcontainer_id: str | None = None  # None: ``${devcontainerId}`` is left unknown

    def substitute(self, text: str) -> Substituted:
        """Replace the variables in *text*; ``${containerEnv:X}`` is the container's."""
        secrets: list[str] = []
        unknown: list[str] = []

        def replace(match: re.Match[str]) -> str:
            kind, _, rest = match.group(1).partition(":")
            name, _, default = rest.partition(":")
            if kind in ("localEnv", "env") and name:
                if looks_secret(name):
                    secrets.append(name)
                    return ""
                return self.environ.get(name, default)
            if kind == "containerEnv":
                return match.group(0)
            local = self.local_workspace.rstrip("/") or "/"
            container = self.container_workspace.rstrip("/") or "/"
            known = {
                "localWorkspaceFolder": local,
                "localWorkspaceFolderBasename": posixpath.basename(local),
                "containerWorkspaceFolder": container,
                "containerWorkspaceFolderBasename": posixpath.basename(container),
            }
            if self.devcontainer_id is not None:
                known["devcontainerId"] = self.devcontainer_id
            if match.group(1) in known:
                return known[match.group(1)]
            unknown.append(match.group(0))
            return match.group(0)

        result = _VARIABLE.sub(replace, text)
        return Substituted(result, tuple(secrets), tuple(unknown))
