"""YAML syntax errors in plain words: one line, the file, and the line to fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from cloister_core.config import parse_yaml
from cloister_core.errors import ConfigError

FILE = Path("/c/config.yaml")


@pytest.mark.parametrize(
    ("text", "where", "message"),
    [
        (
            "proxy:\n\tallow: []\n",
            "2:1",
            "this line is indented with a tab; YAML indents with spaces",
        ),
        ("proxy:\n  allow:\n  \t- domain: x\n", "3:1", "indented with a tab"),
        (
            "proxy:\n  allowed_ports: [80]\n  allowed_ports: [443]\n",
            "3:3",
            "key 'allowed_ports' is given twice in the same mapping; keep one",
        ),
        (
            "proxy:\n  allow:\n    - pattern: *.github.com\n",
            "3:16",
            "a value that starts with '*' must be quoted: write \"*.github.com\"",
        ),
        (
            "proxy:\n  deny:\n    - pattern: **.pastebin.com  # no\n",
            "3:16",
            'must be quoted: write "**.pastebin.com"',
        ),
        (
            "proxy:\n  allow: [{domain: a.com}\n  deny: []\n",
            "3:3",
            "the '[' on line 2 is not closed by ']' (or an item before here misses its ',')",
        ),
        ("proxy: {allow: []\n", "2:1", "the '{' on line 1 is not closed by '}'"),
        ("proxy:\n  allow: [\n    - x\n", "3:5", "'- item' lines cannot go inside brackets"),
        (
            'proxy:\n  allow:\n    - domain: "a.com\n  deny: []\n',
            "3:15",
            "this quoted value is never closed",
        ),
        (
            "proxy:\n  allow:\n  - domain: a.com\n   deny: []\n",
            "4:4",
            "does not line up with the block that starts on line 2: check its indentation",
        ),
        (
            "proxy:\n  allow:\n    - domain: a\n    domain b\n  deny: []\n",
            "4:5",
            "this line is neither 'key: value' nor '- item' (a ':' is missing?)",
        ),
        (
            "hostexec:\n  auto_approve:\n    - pattern: ^git: x$\n",
            "3:20",
            "unexpected ':' here: quote a value that contains ': '",
        ),
        ("defaults:\n  image: @me\n", "2:10", "a value cannot start with '@': put it in quotes"),
        (
            'hostexec:\n  auto_approve:\n    - pattern: "^make \\S+$"\n',
            "3:24",
            "'\\S' is not an escape in double quotes: write the value in single quotes",
        ),
    ],
)
def test_plain_words(text: str, where: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_yaml(text, FILE)
    rendered = str(caught.value)
    assert rendered.startswith(f"{FILE}:{where}: invalid YAML: "), rendered
    assert message in rendered
    assert "\n" not in rendered  # one line, not the parser's trace
    assert "while parsing" not in rendered
    assert "while scanning" not in rendered
    assert "https://" not in rendered  # nor ruamel's link
