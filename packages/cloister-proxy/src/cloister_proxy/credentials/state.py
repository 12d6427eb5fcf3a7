"""What the credential gateway reads from files, re-read when they change.

Tokens (``<config>/tokens``, as the proxy reads them), the stored credentials (the
gateway's own mount, ``/secrets``), and from ``config.yaml`` the ``agents.*.api_base``
and ``proxy.allow_private_networks`` (the address guard the upstream connection gets,
the proxy's own). Files are the source of truth; each lookup costs a ``stat``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from cloister_core.config import load_global_config
from cloister_core.config.models import GlobalConfig
from cloister_core.credentials import PROVIDERS, CredentialError, StoredCredential, load_file
from cloister_core.errors import CloisterError
from cloister_core.paths import CloisterPaths
from cloister_core.tokens import TokenRecord
from cloister_core.watch import Signature, TokenDirectory, file_signature
from cloister_proxy.addresses import NO_NETWORKS, AddressGuard, IPAddress, IPNetwork, NetworkSet
from cloister_proxy.state import OwnNetworkReader


@dataclass(slots=True)
class _Cached:
    signature: Signature
    value: StoredCredential | None


class CredentialState:
    def __init__(
        self,
        paths: CloisterPaths,
        secrets_dir: Path,
        own_addresses: Iterable[IPAddress],
        report: Callable[[str], None],
        *,
        guardian_networks: Iterable[IPNetwork] = (),
        own_networks: OwnNetworkReader | None = None,
    ) -> None:
        self._paths = paths
        self._secrets = secrets_dir
        self._own = list(own_addresses)
        self._guardian = NetworkSet(guardian_networks)
        self._own_networks = own_networks
        self._report = report
        self.tokens = TokenDirectory(paths.tokens_dir, report)
        self._credentials: dict[str, _Cached] = {}
        self._config: tuple[Signature, GlobalConfig, AddressGuard] | None = None
        self._config_error: str | None = None

    def token(self, value: str) -> TokenRecord | None:
        self.tokens.refresh()
        return self.tokens.lookup(value)

    def credential(self, agent: str) -> StoredCredential | None:
        path = self._secrets / f"{agent}.json"
        signature = file_signature(path)
        cached = self._credentials.get(agent)
        if cached is None or cached.signature != signature:
            try:
                value = load_file(path)
            except CredentialError as error:
                self._report(str(error))
                value = None
            cached = self._credentials[agent] = _Cached(signature, value)
        return cached.value

    def _load(self) -> tuple[GlobalConfig, AddressGuard]:
        signature = file_signature(self._paths.config_file)
        if self._config is None or self._config[0] != signature:
            try:
                config = load_global_config(self._paths, create=False)
            except CloisterError as error:
                if str(error) != self._config_error:
                    self._config_error = str(error)
                    self._report(f"configuration error, using the last good one: {error}")
                if self._config is not None:
                    return self._config[1], self._config[2]
                config = GlobalConfig()
            guard = AddressGuard(config.proxy.allow_private_networks, self._own, self._guardian)
            self._config = (signature, config, guard)
        return self._config[1], self._config[2]

    def api_bases(self) -> dict[str, str | None]:
        config, _ = self._load()
        return {agent: config.agents.of(agent).api_base for agent in PROVIDERS}

    def guard(self) -> AddressGuard:
        return self._load()[1]

    def own_networks(self, *, ipv6: bool) -> NetworkSet:
        """The networks of the gateway's interfaces and loopback, as they are now."""
        if self._own_networks is None:
            return NO_NETWORKS
        return self._own_networks(ipv6=ipv6)
