"""Host, authority and pattern normalisation: tables plus a property test."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cloister_core.errors import InvalidHostError
from cloister_core.hosts import (
    DomainPattern,
    normalize_authority,
    normalize_host,
    normalize_pattern,
    split_host_port,
)


@pytest.mark.parametrize(
    ("text", "name", "kind"),
    [
        ("example.com", "example.com", "domain"),
        ("API.Example.COM", "api.example.com", "domain"),
        ("example.com.", "example.com", "domain"),
        ("bücher.example", "xn--bcher-kva.example", "domain"),
        ("BÜCHER.Example.", "xn--bcher-kva.example", "domain"),
        ("xn--bcher-kva.example", "xn--bcher-kva.example", "domain"),
        ("例え.テスト", "xn--r8jz45g.xn--zckzah", "domain"),
        ("ｅｘａｍｐｌｅ．ｃｏｍ", "example.com", "domain"),  # noqa: RUF001 (full-width on purpose)
        ("_dmarc.example.com", "_dmarc.example.com", "domain"),
        ("localhost", "localhost", "domain"),
        ("192.0.2.1", "192.0.2.1", "ipv4"),
        ("127.1", "127.0.0.1", "ipv4"),
        ("2130706433", "127.0.0.1", "ipv4"),
        ("0x7f.0.0.1", "127.0.0.1", "ipv4"),
        ("0177.0.0.1", "127.0.0.1", "ipv4"),
        ("192.0.2.1.", "192.0.2.1", "ipv4"),
        ("[::1]", "::1", "ipv6"),
        ("::1", "::1", "ipv6"),
        ("[2001:DB8:0:0::1]", "2001:db8::1", "ipv6"),
        ("::ffff:127.0.0.1", "::ffff:7f00:1", "ipv6"),
    ],
)
def test_normalize_host(text: str, name: str, kind: str) -> None:
    host = normalize_host(text)
    assert (host.name, host.kind) == (name, kind)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("", "empty"),
        (".", "empty"),
        ("a..b", "invalid label"),
        ("ex ample.com", "character"),
        ("evil.com/x", "character"),
        ("user@evil.com", "character"),
        ("evil.com\x00.good.com", "character"),
        ("a" * 64 + ".com", "invalid label"),
        (("a" * 60 + ".") * 5 + "com", "longer than"),
        ("1.2.3.4.5", "not a valid IPv4"),
        ("foo.123", "not a valid IPv4"),
        ("256.1.1.1", "not a valid IPv4"),
        ("[::1", "unbalanced"),
        ("[not-ipv6]", "IPv6"),
        ("fe80::1%eth0", "zone"),
        ("1:2", "IPv6"),
    ],
)
def test_normalize_host_refuses(text: str, problem: str) -> None:
    with pytest.raises(InvalidHostError, match=problem):
        normalize_host(text)


def test_domain_host_has_its_suffixes() -> None:
    assert normalize_host("a.b.example.com").suffixes == (
        "a.b.example.com",
        "b.example.com",
        "example.com",
        "com",
    )
    assert normalize_host("10.0.0.1").suffixes == ("10.0.0.1",)


@pytest.mark.parametrize(
    ("authority", "expected"),
    [
        ("example.com:443", ("example.com", 443)),
        ("example.com", ("example.com", None)),
        ("[::1]:8443", ("::1", 8443)),
        ("[::1]", ("::1", None)),
        ("::1", ("::1", None)),
        ("192.0.2.1:80", ("192.0.2.1", 80)),
    ],
)
def test_split_host_port(authority: str, expected: tuple[str, int | None]) -> None:
    assert split_host_port(authority) == expected


@pytest.mark.parametrize(
    "authority", ["x.com:", "x.com:0", "x.com:65536", "x.com:8o", "x.com:+1", "[::1]x"]
)
def test_split_host_port_refuses(authority: str) -> None:
    with pytest.raises(InvalidHostError):
        split_host_port(authority)


def test_normalize_authority() -> None:
    host, port = normalize_authority("Example.COM.:8443")
    assert (host.name, port) == ("example.com", 8443)
    assert normalize_authority("example.com", default_port=80)[1] == 80
    assert normalize_host("[::1]").authority(443) == "[::1]:443"
    with pytest.raises(InvalidHostError, match="no port"):
        normalize_authority("example.com")


@pytest.mark.parametrize(
    ("text", "kind", "suffix"),
    [
        ("*.example.com", "one-level", "example.com"),
        ("**.Example.COM.", "any-depth", "example.com"),
        ("*.bücher.example", "one-level", "xn--bcher-kva.example"),
    ],
)
def test_normalize_pattern(text: str, kind: str, suffix: str) -> None:
    pattern = normalize_pattern(text)
    assert (pattern.kind, pattern.suffix) == (kind, suffix)
    assert normalize_pattern(str(pattern)) == pattern


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("example.com", "must start with"),
        ("a.*.example.com", "must start with"),
        ("*.*.example.com", "only have a wildcard at the start"),
        ("*example.com", "must start with"),
        ("*.10.0.0.1", "IP address"),
        ("*.", "empty"),
    ],
)
def test_normalize_pattern_refuses(text: str, problem: str) -> None:
    with pytest.raises(InvalidHostError, match=problem):
        normalize_pattern(text)


@pytest.mark.parametrize(
    ("pattern", "host", "matches"),
    [
        ("*.example.com", "example.com", True),
        ("*.example.com", "api.example.com", True),
        ("*.example.com", "a.b.example.com", False),
        ("*.example.com", "notexample.com", False),
        ("**.example.com", "example.com", True),
        ("**.example.com", "a.b.c.example.com", True),
        ("**.example.com", "example.com.evil.test", False),
        ("**.example.com", "10.0.0.1", False),
    ],
)
def test_pattern_reference_semantics(pattern: str, host: str, matches: bool) -> None:
    assert normalize_pattern(pattern).matches(normalize_host(host)) is matches


LABEL_CHARS = "abcxyz019-_ABCäöüßéあ"
labels = st.text(alphabet=LABEL_CHARS, min_size=1, max_size=8)
domain_like = st.builds(
    lambda parts, dot: ".".join(parts) + ("." if dot else ""),
    st.lists(labels, min_size=1, max_size=5),
    st.booleans(),
)
ip_like = st.one_of(
    st.ip_addresses().map(str),
    st.ip_addresses(v=6).map(lambda address: f"[{address}]"),
    st.integers(min_value=0, max_value=2**32 - 1).map(str),
)
anything = st.text(max_size=40)


@given(st.one_of(domain_like, ip_like, anything))
def test_normalisation_is_idempotent(text: str) -> None:
    try:
        host = normalize_host(text)
    except InvalidHostError:
        return
    assert normalize_host(host.name) == host
    assert host.name == host.name.lower()
    assert host.name.isascii()
    assert not host.name.endswith(".")
    if host.kind == "ipv6":
        assert normalize_host(f"[{host.name}]") == host


@given(st.sampled_from(["*.", "**."]), domain_like)
def test_pattern_normalisation_is_idempotent(prefix: str, text: str) -> None:
    try:
        pattern = normalize_pattern(prefix + text)
    except InvalidHostError:
        return
    assert normalize_pattern(str(pattern)) == pattern
    assert isinstance(pattern, DomainPattern)


@pytest.mark.parametrize(
    ("host", "wildcard"),
    [
        ("api.example.com", "*.example.com"),
        ("a.b.example.com", "*.b.example.com"),
        ("example.com", "*.example.com"),
        ("foo.co.uk", "*.foo.co.uk"),
        ("www.foo.co.uk", "*.foo.co.uk"),
        ("user.github.io", "*.user.github.io"),
        ("co.uk", None),
        ("com", None),
        ("localhost", None),
        ("192.0.2.1", None),
        ("BÜCHER.example", "*.xn--bcher-kva.example"),
    ],
)
def test_wildcard_for(host: str, wildcard: str | None) -> None:
    from cloister_core.suffixes import PublicSuffixes

    pattern = PublicSuffixes().wildcard_for(normalize_host(host))
    assert (str(pattern) if pattern else None) == wildcard
