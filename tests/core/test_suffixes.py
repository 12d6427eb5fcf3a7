"""The public suffix list: wildcards to offer, and suffixes the list itself names."""

from __future__ import annotations

import pytest

from cloister_core.hosts import normalize_host
from cloister_core.suffixes import PublicSuffixes


@pytest.fixture(scope="module")
def suffixes() -> PublicSuffixes:
    return PublicSuffixes()


@pytest.mark.parametrize(
    ("name", "listed"),
    [
        ("com", True),
        ("co.uk", True),
        ("github.io", True),  # the list's private section: anyone's site
        ("example.com", False),
        ("api.github.com", False),
        ("intranet", False),  # public only by the implicit "*" rule
        ("corp", False),
        ("xn--p1ai", True),  # .рф, asked in the A-label form host names have here
        ("xn--80ao21a", True),  # .қаз
        ("xn--e1afmkfd.xn--p1ai", False),  # пример.рф: a site
        ("xn--zz", False),  # not punycode at all
    ],
)
def test_is_listed(suffixes: PublicSuffixes, name: str, listed: bool) -> None:
    assert suffixes.is_listed(name) is listed


@pytest.mark.parametrize(
    ("host", "offered"),
    [
        ("api.example.com", "*.example.com"),
        ("example.com", "*.example.com"),
        ("foo.co.uk", "*.foo.co.uk"),
        ("com", None),
        ("10.0.0.1", None),
        ("api.xn--e1afmkfd.xn--p1ai", "*.xn--e1afmkfd.xn--p1ai"),
        ("foo.xn--p1ai", "*.foo.xn--p1ai"),  # the parent, .рф, is public
        ("xn--p1ai", None),
    ],
)
def test_wildcard_for(suffixes: PublicSuffixes, host: str, offered: str | None) -> None:
    pattern = suffixes.wildcard_for(normalize_host(host))
    assert (str(pattern) if pattern is not None else None) == offered
