"""Public suffixes (``com``, ``co.uk``, ``github.io``): where a wildcard must stop.

The approval UI offers "allow ``*.parent``" for a held host. For ``api.example.com``
that is ``*.example.com``; for ``foo.co.uk`` it must not be ``*.co.uk`` (every site
registered under ``co.uk``). The list is the Public Suffix List as bundled by the
``publicsuffixlist`` package (no network access); load it once per process.
"""

from __future__ import annotations

from publicsuffixlist import PublicSuffixList

from cloister_core.hosts import DomainPattern, Host


def _unicode(name: str) -> str:
    """*name* with its ``xn--`` labels as the list writes them (Unicode); a label that
    does not decode stays as it is (the list names no such suffix)."""
    if "xn--" not in name:
        return name
    return ".".join(_decoded(label) for label in name.split("."))


def _decoded(label: str) -> str:
    if not label.startswith("xn--"):
        return label
    try:
        return label[4:].encode("ascii").decode("punycode")
    except UnicodeError:
        return label


class PublicSuffixes:
    """The bundled Public Suffix List, loaded once (about 12 ms).

    The list is kept in the Unicode form it is written in: encoding every entry to
    ``xn--`` as well would triple the load, on every ``cloister config check``; names
    asked about are decoded instead.
    """

    def __init__(self) -> None:
        self._list = PublicSuffixList(accept_encoded_idn=False)

    def is_public(self, name: str) -> bool:
        return bool(self._list.is_public(_unicode(name)))

    def is_listed(self, name: str) -> bool:
        """Whether the list itself names *name* as a public suffix (``com``, ``co.uk``).

        Unlike :meth:`is_public`, an unknown top-level name (``intranet``, ``corp``) is
        not one: the list's implicit ``*`` rule would flag every private network's names.
        """
        decoded = _unicode(name)
        return bool(self._list.publicsuffix(decoded, accept_unknown=False) == decoded)

    def wildcard_for(self, host: Host) -> DomainPattern | None:
        """The ``*.parent`` pattern to offer for *host*; None for IPs and public suffixes.

        ``api.example.com`` → ``*.example.com``; ``example.com`` → ``*.example.com``
        (the apex and one label below); ``foo.co.uk`` → ``*.foo.co.uk`` because the
        parent is a public suffix.
        """
        if host.kind != "domain" or self.is_public(host.name):
            return None
        if len(host.suffixes) < 2 or self.is_public(host.suffixes[1]):
            return DomainPattern(kind="one-level", suffix=host.name)
        return DomainPattern(kind="one-level", suffix=host.suffixes[1])
