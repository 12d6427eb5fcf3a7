"""Host names, IP literals, authorities and domain patterns, normalised.

Everything the policy compares goes through :func:`normalize_host` first, so that two
spellings of one destination can never get two different verdicts:

* case is folded and one trailing dot removed (``API.Example.COM.`` → ``api.example.com``);
* internationalised names become their IDNA A-label form via UTS #46
  (``bücher.example`` → ``xn--bcher-kva.example``); ASCII names are kept as they are,
  underscores included, because real DNS names carry them;
* IPv6 literals lose their brackets and take the canonical compressed form;
* a name whose last label is a number is an IPv4 address in the forms the C library
  resolver accepts (``2130706433``, ``0x7f.1``, ``0177.0.0.1``), normalised to dotted
  quad, as the WHATWG URL standard does, so an IP cannot hide behind a "domain" that
  the resolver would read as an address anyway. Such a name that is not a valid
  address is refused.

Pure functions, no I/O. The result is idempotent: ``normalize_host(h.name) == h``.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from dataclasses import dataclass
from typing import Literal, NamedTuple

import idna

from cloister_core.errors import InvalidHostError

HostKind = Literal["domain", "ipv4", "ipv6"]
PatternKind = Literal["one-level", "any-depth"]

MAX_NAME_LENGTH = 253
# A whole lower-case ASCII name in one match: labels of 1-63 letters, digits, '-', '_'.
_ASCII_NAME = re.compile(r"(?:[a-z0-9_-]{1,63}\.)*[a-z0-9_-]{1,63}")
_LABEL = re.compile(r"[a-z0-9_-]{1,63}")
_NUMERIC_LABEL = re.compile(r"(0x[0-9a-f]*|[0-9]+)")
_PORT = re.compile(r"[0-9]{1,5}")
# Characters that would make a "host" mean something else in a URL or a header.
_FORBIDDEN = re.compile(r"[\x00-\x20\x7f/\\?#@%]")


class Host(NamedTuple):
    """A normalised destination host: a domain name or an IP address.

    A named tuple rather than a dataclass because the proxy builds one per request
    and tuple construction is several times cheaper; it is just as immutable.
    """

    name: str
    kind: HostKind
    # The names this host sits below, itself first: a.b.c → (a.b.c, b.c, c); an IP
    # has only itself. The policy looks each up once.
    suffixes: tuple[str, ...]

    @property
    def is_ip(self) -> bool:
        return self.kind != "domain"

    def authority(self, port: int) -> str:
        """``host:port`` with IPv6 in brackets, for logs and messages."""
        if self.kind == "ipv6":
            return f"[{self.name}]:{port}"
        return f"{self.name}:{port}"

    def __str__(self) -> str:
        return self.name


def _ip_host(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> Host:
    name = str(address)
    return Host(name, "ipv4" if address.version == 4 else "ipv6", (name,))


def _ipv6(text: str, original: str) -> Host:
    if "%" in text:
        raise InvalidHostError(f"IPv6 zone identifiers are not allowed: {original!r}")
    try:
        return _ip_host(ipaddress.IPv6Address(text))
    except ValueError:
        raise InvalidHostError(f"not a valid IPv6 address: {original!r}") from None


def _to_ascii(text: str) -> str:
    """Lower-case ASCII (A-label) form of an internationalised name."""
    try:
        # UTS #46 mapping also folds case and maps full-width dots to '.'.
        mapped = idna.uts46_remap(text, std3_rules=False, transitional=False)
        labels = [
            label if label.isascii() else idna.alabel(label).decode("ascii")
            for label in mapped.split(".")
        ]
    except (idna.IDNAError, UnicodeError) as error:
        raise InvalidHostError(f"not a valid internationalised name: {text!r} ({error})") from None
    return ".".join(labels).lower()


def _numeric_ipv4(name: str, original: str) -> Host:
    try:
        packed = socket.inet_aton(name)
    except OSError:
        raise InvalidHostError(
            f"{original!r} ends in a number but is not a valid IPv4 address"
        ) from None
    return _ip_host(ipaddress.IPv4Address(packed))


def _explain_invalid(name: str, original: str) -> InvalidHostError:
    """The specific reason *name* (lower-case, no trailing dot) is not a host name."""
    if not name:
        return InvalidHostError(f"host {original!r} is empty once its trailing dot is removed")
    if _FORBIDDEN.search(name):
        return InvalidHostError(f"host {original!r} contains a character a host name cannot have")
    for label in name.split("."):
        if not _LABEL.fullmatch(label):
            return InvalidHostError(f"host {original!r} has an invalid label {label!r}")
    return InvalidHostError(f"host {original!r} is not a valid host name")


def normalize_host(text: str) -> Host:
    """Normalise a bare host (no port): a domain name, an IPv4 or an IPv6 literal.

    Raises :class:`InvalidHostError` saying what was wrong. This is on the proxy's
    per-request path, so the common case (an ASCII name) is one regex match.
    """
    if not isinstance(text, str) or not text:
        raise InvalidHostError("host must not be empty")
    if text[0] == "[":
        if text[-1] != "]":
            raise InvalidHostError(f"unbalanced brackets in host {text!r}")
        return _ipv6(text[1:-1], text)
    if ":" in text:
        return _ipv6(text, text)

    name = text.lower() if text.isascii() else _to_ascii(text)
    if name[-1:] == ".":
        name = name[:-1]
    if len(name) > MAX_NAME_LENGTH:
        raise InvalidHostError(f"host {text!r} is longer than {MAX_NAME_LENGTH} characters")
    if _ASCII_NAME.fullmatch(name) is None:
        raise _explain_invalid(name, text)

    last_dot = name.rfind(".")
    if name[last_dot + 1] in "0123456789" and _NUMERIC_LABEL.fullmatch(name, last_dot + 1):
        return _numeric_ipv4(name, text)
    suffixes = [name]
    dot = name.find(".")
    while dot >= 0:
        suffixes.append(name[dot + 1 :])
        dot = name.find(".", dot + 1)
    return Host(name, "domain", tuple(suffixes))


def parse_port(text: str) -> int:
    """A decimal TCP port, 1-65535."""
    if not _PORT.fullmatch(text):
        raise InvalidHostError(f"not a valid port: {text!r}")
    port = int(text)
    if not 1 <= port <= 65535:
        raise InvalidHostError(f"port out of range: {text!r}")
    return port


def split_host_port(authority: str) -> tuple[str, int | None]:
    """Split ``host[:port]`` as found in a CONNECT line or a ``Host`` header.

    ``[::1]:443`` → (``::1``, 443); a bare IPv6 literal has no port; the host part is
    returned as written (normalise it with :func:`normalize_host`).
    """
    if authority.startswith("["):
        end = authority.find("]")
        if end < 0:
            raise InvalidHostError(f"unbalanced brackets in {authority!r}")
        host, rest = authority[1:end], authority[end + 1 :]
        if not rest:
            return host, None
        if not rest.startswith(":"):
            raise InvalidHostError(f"unexpected text after ']' in {authority!r}")
        return host, parse_port(rest[1:])
    if authority.count(":") > 1:
        return authority, None  # bare IPv6 literal
    host, sep, port = authority.partition(":")
    if not sep:
        return host, None
    return host, parse_port(port)


def normalize_authority(authority: str, default_port: int | None = None) -> tuple[Host, int]:
    """Normalise ``host[:port]``; the port falls back to *default_port*."""
    host_text, port = split_host_port(authority)
    if port is None:
        if default_port is None:
            raise InvalidHostError(f"{authority!r} has no port")
        port = default_port
    return normalize_host(host_text), port


@dataclass(frozen=True, slots=True)
class DomainPattern:
    """``*.suffix`` (the apex and one label below) or ``**.suffix`` (any depth)."""

    kind: PatternKind
    suffix: str

    def __str__(self) -> str:
        return ("*." if self.kind == "one-level" else "**.") + self.suffix

    def matches(self, host: Host) -> bool:
        """Reference semantics, label by label (the policy uses an index instead)."""
        if host.kind != "domain":
            return False
        if host.name == self.suffix:
            return True
        if not host.name.endswith("." + self.suffix):
            return False
        if self.kind == "any-depth":
            return True
        head = host.name[: -len(self.suffix) - 1]
        return "." not in head


def normalize_pattern(text: str) -> DomainPattern:
    """Parse ``*.example.com`` or ``**.example.com`` (any case, IDNA, trailing dot)."""
    if not isinstance(text, str):
        raise InvalidHostError(f"pattern must be a string, not {type(text).__name__}")
    if text.startswith("**."):
        kind: PatternKind = "any-depth"
        rest = text[3:]
    elif text.startswith("*."):
        kind = "one-level"
        rest = text[2:]
    else:
        raise InvalidHostError(
            f"pattern {text!r} must start with '*.' (one label) or '**.' (any depth);"
            " use 'domain:' for an exact name"
        )
    if "*" in rest:
        raise InvalidHostError(f"pattern {text!r} may only have a wildcard at the start")
    host = normalize_host(rest)
    if host.kind != "domain":
        raise InvalidHostError(f"pattern {text!r} names an IP address; use 'domain:' for IPs")
    return DomainPattern(kind=kind, suffix=host.name)
