"""Fetching a Feature from an OCI registry (the distribution API), on the host.

The only module of the package that touches the network. Anonymous pulls only (the
token dance a registry asks for public images is done; no credentials are read, not
even ``.netrc``). A registry on loopback is spoken to over plain http, as docker does;
every other over https. Everything fetched is verified by its sha256 and bounded in size.

The project names the registry, and the registry names the URLs the host then asks
(its token ``realm``, its redirects): each must be https to a host that is not this
machine's nor a private address, or the loopback registry itself (:func:`url_problem`),
so a Feature id cannot make the host send requests to a service on the host or its
network; the token goes to the registry only.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import re
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import requests

from cloister_core.errors import CloisterError
from cloister_core.printable import printable

MANIFEST_TYPES = (
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
)
LAYER_TYPE = "application/vnd.devcontainers.layer.v1+tar"
METADATA_ANNOTATION = "dev.containers.metadata"
MANIFEST_LIMIT = 4 * 1024 * 1024
LAYER_LIMIT = 64 * 1024 * 1024  # a Feature is a script and a few files
TIMEOUT = 30.0  # seconds, per request (connect and each read)
MAX_REDIRECTS = 5

_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
_REPOSITORY = re.compile(
    r"^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*$"
)
_TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
_REGISTRY = re.compile(r"^(?:[A-Za-z0-9.-]+|\[[0-9A-Fa-f:]+\])(?::[0-9]+)?$")


class FeatureFetchError(CloisterError):
    """A Feature that cannot be fetched: what, from where, and why."""


@dataclass(frozen=True, slots=True)
class Reference:
    """``<registry>/<repository>:<tag>`` or ``…@sha256:<hex>``, as a Feature id names one."""

    registry: str
    repository: str
    tag: str | None
    digest: str | None

    @classmethod
    def parse(cls, text: str) -> Reference:
        """*text* as a reference; :class:`FeatureFetchError` when it is none."""
        rest, digest = text, None
        if "@" in rest:
            rest, _, digest = rest.partition("@")
            if not _DIGEST.match(digest):
                raise FeatureFetchError(f"Feature {text!r}: {digest!r} is no sha256 digest")
        tag: str | None = None
        last = rest.rsplit("/", 1)[-1]
        if ":" in last:
            rest, _, tag = rest.rpartition(":")
            if not _TAG.match(tag):
                raise FeatureFetchError(f"Feature {text!r}: {tag!r} is no tag")
        registry, slash, repository = rest.partition("/")
        if not slash or not _REGISTRY.match(registry) or not _REPOSITORY.match(repository):
            raise FeatureFetchError(f"Feature {text!r} is not <registry>/<path>[:tag|@sha256:…]")
        if tag is None and digest is None:
            tag = "latest"
        return cls(registry.lower(), repository, tag, digest)

    @property
    def resource(self) -> str:
        """``<registry>/<repository>``, as the lock file's ``resolved`` starts."""
        return f"{self.registry}/{self.repository}"

    def at(self, digest: str) -> str:
        """``<registry>/<repository>@<digest>``."""
        return f"{self.resource}@{digest}"

    @property
    def loopback(self) -> bool:
        host = (
            self.registry.rsplit(":", 1)[0]
            if not self.registry.startswith("[")
            else (self.registry[1:].split("]", 1)[0])
        )
        if host == "localhost":
            return True
        try:
            return ipaddress.ip_address(host).is_loopback
        except ValueError:
            return False

    @property
    def base_url(self) -> str:
        return f"{'http' if self.loopback else 'https'}://{self.registry}/v2/{self.repository}"


@dataclass(frozen=True, slots=True)
class Fetched:
    """A Feature's manifest and its layer (a tar), both verified."""

    reference: Reference
    digest: str  # the manifest's
    manifest: bytes
    layer: bytes
    annotation: str | None  # the manifest's dev.containers.metadata, if any


def sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


class Client:
    """Anonymous distribution-API client; one per start (it keeps the tokens it was given)."""

    def __init__(self, *, timeout: float = TIMEOUT, session: requests.Session | None = None):
        self._timeout = timeout
        self._session = session or requests.Session()
        self._session.trust_env = False  # no .netrc, no credentials of the host's
        self._tokens: dict[str, str] = {}

    def close(self) -> None:
        self._session.close()

    def resolve(self, reference: Reference) -> str:
        """The digest of the manifest *reference*'s tag names now."""
        if reference.digest is not None:
            return reference.digest
        _, digest = self._manifest(reference, reference.tag or "latest")
        return digest

    def fetch(self, reference: Reference, digest: str) -> Fetched:
        """The manifest *digest* of *reference*'s repository and its Feature layer."""
        manifest, got = self._manifest(reference, digest)
        if got != digest:
            raise self._error(reference, f"the registry sent manifest {got}, not {digest}")
        document = _json(manifest, reference, self)
        layers = document.get("layers")
        if not isinstance(layers, list) or not layers or not isinstance(layers[0], dict):
            raise self._error(reference, "its manifest lists no layer")
        layer = layers[0]
        layer_digest = layer.get("digest")
        if not isinstance(layer_digest, str) or not _DIGEST.match(layer_digest):
            raise self._error(reference, f"its layer digest {layer_digest!r} is no sha256")
        size = layer.get("size")
        if isinstance(size, int) and size > LAYER_LIMIT:
            raise self._error(reference, f"its layer is {size} bytes (more than {LAYER_LIMIT})")
        blob = self._get(reference, f"{reference.base_url}/blobs/{layer_digest}", LAYER_LIMIT)
        if sha256(blob) != layer_digest:
            raise self._error(reference, f"the layer's content is not {layer_digest}")
        annotations = document.get("annotations")
        annotation = None
        if isinstance(annotations, dict):
            value = annotations.get(METADATA_ANNOTATION)
            annotation = value if isinstance(value, str) else None
        return Fetched(reference, digest, manifest, blob, annotation)

    # -- the protocol ------------------------------------------------------------------

    def _manifest(self, reference: Reference, tag_or_digest: str) -> tuple[bytes, str]:
        url = f"{reference.base_url}/manifests/{tag_or_digest}"
        headers = {"Accept": ", ".join(MANIFEST_TYPES)}
        with self._request(reference, url, headers) as response:
            body = _read(response, MANIFEST_LIMIT, reference, self)
        digest = sha256(body)
        if tag_or_digest.startswith("sha256:") and digest != tag_or_digest:
            raise self._error(reference, f"the manifest's content is not {tag_or_digest}")
        return body, digest

    def _get(self, reference: Reference, url: str, limit: int) -> bytes:
        with self._request(reference, url, {}) as response:
            return _read(response, limit, reference, self)

    def _request(self, reference: Reference, url: str, headers: Mapping[str, str]) -> _Response:
        response = self._send(reference, url, headers)
        if response.status_code == 401:
            challenge = response.headers.get("WWW-Authenticate", "")
            response.close()
            self._tokens[reference.resource] = self._token(reference, challenge)
            response = self._send(reference, url, headers)
        if response.status_code != 200:
            status = response.status_code
            response.close()
            why = "not found" if status == 404 else f"HTTP {status}"
            raise self._error(reference, f"{why} ({printable(url)})")
        return _Response(response)

    def _send(
        self,
        reference: Reference,
        url: str,
        headers: Mapping[str, str],
        params: Mapping[str, str] | None = None,
    ) -> requests.Response:
        """GET *url*, following at most :data:`MAX_REDIRECTS` redirects, each checked."""
        for _ in range(MAX_REDIRECTS + 1):
            if (problem := url_problem(reference, url)) is not None:
                raise self._error(reference, problem)
            sent = dict(headers)
            token = self._tokens.get(reference.resource)
            if (
                token is not None
                and urllib.parse.urlsplit(url).netloc.lower() == reference.registry
            ):
                sent["Authorization"] = f"Bearer {token}"
            try:
                response = self._session.get(
                    url,
                    headers=sent,
                    params=params,
                    timeout=self._timeout,
                    stream=True,
                    allow_redirects=False,
                    proxies=None if reference.loopback else _proxies(),
                )
            except requests.RequestException as error:
                raise self._error(reference, _reason(error)) from None
            if not response.is_redirect:
                return response
            url = urllib.parse.urljoin(response.url, response.headers["Location"])
            params = None  # the new URL holds them
            response.close()
        raise self._error(reference, f"more than {MAX_REDIRECTS} redirects")

    def _token(self, reference: Reference, challenge: str) -> str:
        """An anonymous pull token, as the registry's ``WWW-Authenticate`` asks."""
        scheme, _, rest = challenge.partition(" ")
        fields = dict(re.findall(r'(\w+)="([^"]*)"', rest))
        realm = fields.get("realm")
        if scheme.lower() != "bearer" or not realm:
            raise self._error(reference, "the registry wants credentials (only anonymous pulls)")
        params = {"scope": fields.get("scope") or f"repository:{reference.repository}:pull"}
        if "service" in fields:
            params["service"] = fields["service"]
        try:
            response = self._send(reference, realm, {}, params)
        except FeatureFetchError as error:
            raise FeatureFetchError(f"{error} (asking for its token)") from None
        with _Response(response) as answered:
            if response.status_code != 200:
                raise self._error(reference, f"its token: HTTP {response.status_code}")
            document = _json(_read(answered, 64 * 1024, reference, self), reference, self)
        token = document.get("token") or document.get("access_token")
        if not isinstance(token, str) or not token:
            raise self._error(reference, "the registry's token answer holds no token")
        return token

    def _error(self, reference: Reference, why: str) -> FeatureFetchError:
        return FeatureFetchError(
            f"cannot fetch Feature {printable(reference.resource)} from"
            f" {printable(reference.registry)}: {why}"
        )


class _Response:
    """A streamed response, closed on leaving."""

    def __init__(self, response: requests.Response) -> None:
        self.response = response

    def __enter__(self) -> _Response:
        return self

    def __exit__(self, *exc: object) -> None:
        self.response.close()

    def chunks(self) -> Iterator[bytes]:
        return self.response.iter_content(256 * 1024)


def _read(response: _Response, limit: int, reference: Reference, client: Client) -> bytes:
    declared = response.response.headers.get("Content-Length", "")
    if declared.isdigit() and int(declared) > limit:
        raise client._error(reference, f"it is {declared} bytes (more than {limit})")
    parts: list[bytes] = []
    total = 0
    try:
        for chunk in response.chunks():
            total += len(chunk)
            if total > limit:
                raise client._error(reference, f"it is more than {limit} bytes")
            parts.append(chunk)
    except requests.RequestException as error:
        raise client._error(reference, _reason(error)) from None
    return b"".join(parts)


def _json(data: bytes, reference: Reference, client: Client) -> dict[str, Any]:
    try:
        document = json.loads(data)
    except (ValueError, UnicodeDecodeError) as error:
        raise client._error(reference, f"the registry sent no JSON ({error})") from None
    if not isinstance(document, dict):
        raise client._error(reference, "the registry sent JSON that is no object")
    return document


def url_problem(reference: Reference, url: str) -> str | None:
    """Why the host must not GET *url* for *reference*'s registry, or None.

    https to a named host or a public address; plain http (or this machine) only for
    the loopback registry itself.
    """
    parts = urllib.parse.urlsplit(url)
    shown = printable(url if len(url) <= 200 else url[:197] + "...")
    if parts.netloc.lower() == reference.registry and parts.scheme == (
        "http" if reference.loopback else "https"
    ):
        return None
    if parts.scheme != "https":
        return f"the registry sends the host to {shown}: only https is followed"
    host = (parts.hostname or "").rstrip(".").lower()
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        local = host in ("", "localhost") or host.endswith((".localhost", ".local"))
    else:
        local = not address.is_global
    if local:
        return f"the registry sends the host to {shown}: not to this machine or its network"
    return None


def _proxies() -> dict[str, str]:
    """The host's proxy settings for https (trust_env is off: no .netrc read)."""
    return {
        scheme: url for scheme, url in urllib.request.getproxies().items() if scheme in ("https",)
    }


def _reason(error: requests.RequestException) -> str:
    if isinstance(error, requests.Timeout):
        return "timed out"
    if isinstance(error, requests.ConnectionError):
        return f"cannot connect ({type(error).__name__})"
    return printable(str(error))
