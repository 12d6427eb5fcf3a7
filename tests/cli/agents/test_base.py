"""The shared part of the agent modules: home files, allowlists, merging, the TOML writer."""

from __future__ import annotations

import json
import os
import tomllib
from pathlib import Path
from typing import Any

import pytest

from cloister_cli.agents.base import (
    AgentSetupError,
    HomeFile,
    deep_merge,
    json_file,
    login_file,
    merge_files,
    pick,
    read_json_object,
    read_toml,
    text_file,
    toml_dumps,
    toml_file,
)
from cloister_core.errors import CloisterError


@pytest.mark.parametrize(
    "path",
    ["settings.json", ".claude.json", "a/b/c.txt", "tmp/x.json"],
)
def test_home_file_paths_inside_the_state_directory(path: str) -> None:
    assert HomeFile(path, b"").path == path


@pytest.mark.parametrize(
    "path",
    ["", "/etc/passwd", "../x", "a/../../x", "a//b", "./a", "a/.", "a\\b", "a\x00b", "a/"],
)
def test_home_file_paths_that_could_leave_it_are_refused(path: str) -> None:
    with pytest.raises(ValueError, match="not a relative path"):
        HomeFile(path, b"")


def test_home_file_mode_is_a_permission_mode() -> None:
    assert HomeFile("x", b"").mode == 0o600
    with pytest.raises(ValueError, match="not a permission mode"):
        HomeFile("x", b"", mode=0o4755)


def test_setup_error_is_a_cloister_error() -> None:
    assert issubclass(AgentSetupError, CloisterError)


# -- reading -----------------------------------------------------------------------------


def test_read_json_object_accepts_comments_and_trailing_commas(tmp_path: Path) -> None:
    path = tmp_path / "s.json"
    path.write_text('{\n  // why\n  "a": {"b": 1,},\n}\n')
    assert read_json_object(path) == {"a": {"b": 1}}


@pytest.mark.parametrize("text", ["[1, 2]", "not json", '"a string"', "\xff"])
def test_read_json_object_leaves_out_what_is_not_an_object(tmp_path: Path, text: str) -> None:
    path = tmp_path / "s.json"
    path.write_text(text, encoding="latin-1")
    assert read_json_object(path) is None


def test_read_json_object_of_a_missing_file_or_a_directory(tmp_path: Path) -> None:
    assert read_json_object(tmp_path / "missing.json") is None
    assert read_json_object(tmp_path) is None


def test_read_toml(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text('a = "b"\n')
    assert read_toml(path) == {"a": "b"}
    path.write_text("a = \n")
    assert read_toml(path) is None
    assert read_toml(tmp_path / "missing.toml") is None


def test_pick_keeps_only_allowed_paths_of_allowed_types() -> None:
    data = {
        "model": "m",
        "verbose": True,
        "days": 3,
        "bool_for_int": True,
        "ui": {"theme": "dark", "command": "rm -rf ~"},
        "hooks": {"x": "y"},
        "table": {"commit": "text", "n": 1},
        "deep": {"nested": {"a": 1}},
        "wrong": 5,
    }
    allowed = {
        ("model",): str,
        ("verbose",): bool,
        ("days",): int,
        ("bool_for_int",): int,
        ("ui", "theme"): str,
        ("table",): dict,
        ("deep",): dict,
        ("wrong",): str,
        ("absent", "key"): str,
    }
    assert pick(data, allowed) == {
        "model": "m",
        "verbose": True,
        "days": 3,
        "ui": {"theme": "dark"},
        "table": {"commit": "text", "n": 1},
    }


def test_pick_through_something_that_is_not_a_table() -> None:
    assert pick({"ui": "dark"}, {("ui", "theme"): str}) == {}


def test_login_file_is_copied_with_its_time(tmp_path: Path) -> None:
    source = tmp_path / "creds.json"
    source.write_text('{"token": "t"}')
    os.utime(source, (1_700_000_000, 1_700_000_000))
    found = login_file(source, "creds.json", how="log in first")
    assert found == HomeFile("creds.json", b'{"token": "t"}', 0o600, host_mtime=1_700_000_000)


@pytest.mark.parametrize("content", [None, "", "[]", "{}", "not json"])
def test_login_file_missing_or_not_a_login(tmp_path: Path, content: str | None) -> None:
    source = tmp_path / "creds.json"
    if content is not None:
        source.write_text(content)
    with pytest.raises(AgentSetupError, match="log in first"):
        login_file(source, "creds.json", how="log in first")


def test_login_file_that_is_a_directory(tmp_path: Path) -> None:
    with pytest.raises(AgentSetupError, match="no login in"):
        login_file(tmp_path, "creds.json", how="log in first")


# -- merging -----------------------------------------------------------------------------


def test_deep_merge_puts_the_top_on_the_base() -> None:
    base = {"a": 1, "t": {"x": 1, "y": 2}, "l": [1], "s": {"k": 1}}
    top = {"b": 2, "t": {"y": 3}, "l": [2], "s": "flat"}
    assert deep_merge(base, top) == {"a": 1, "b": 2, "t": {"x": 1, "y": 3}, "l": [2], "s": "flat"}
    assert base["t"] == {"x": 1, "y": 2}  # not changed in place


def test_merge_files_merges_json_and_toml_and_replaces_the_rest() -> None:
    copied = [
        json_file("settings.json", {"model": "m", "permissions": {"defaultMode": "plan"}}),
        toml_file("config.toml", {"model": "m", "approval_policy": "untrusted"}),
        text_file("RULES.md", "copied"),
        text_file("only-copied.txt", "kept"),
    ]
    generated = [
        json_file("settings.json", {"permissions": {"defaultMode": "bypassPermissions"}}),
        toml_file("config.toml", {"approval_policy": "never", "t": {"k": 1}}),
        text_file("RULES.md", "generated"),
    ]
    files = {item.path: item for item in merge_files([copied, generated])}
    assert json.loads(files["settings.json"].content) == {
        "model": "m",
        "permissions": {"defaultMode": "bypassPermissions"},
    }
    assert tomllib.loads(files["config.toml"].content.decode()) == {
        "model": "m",
        "approval_policy": "never",
        "t": {"k": 1},
    }
    assert files["RULES.md"].content == b"generated"
    assert files["only-copied.txt"].content == b"kept"


def test_merge_keeps_the_later_mode_and_host_time() -> None:
    earlier = json_file("a.json", {"x": 1}, mode=0o644)
    later = HomeFile("a.json", b'{"y": 2}', 0o600, host_mtime=5.0)
    (merged,) = merge_files([[earlier], [later]])
    assert (merged.mode, merged.host_mtime) == (0o600, 5.0)
    assert json.loads(merged.content) == {"x": 1, "y": 2}


# -- TOML --------------------------------------------------------------------------------

TRICKY: dict[str, Any] = {
    "plain": "text",
    "quotes": 'say "hi" \\ back',
    "controls": "tab\tnew\nline\x00nul\x7fdel\x1b",
    "unicode": "héllo ✓ 𝄞",
    "flag": False,
    "count": -3,
    "ratio": 0.25,
    "big": 1e20,
    "list": ["a", 1, True],
    "dotted.key": "v",
    "": "empty key",
    "inline": [{"a": 1}],
    "empty": {},
    "projects": {"/work": {"trust_level": "trusted"}, '/a b/"c"': {"x": 1}},
    "outer": {"value": 1, "inner": {"deeper": {"v": "w"}}},
}


def test_toml_dumps_reads_back_exactly() -> None:
    assert tomllib.loads(toml_dumps(TRICKY)) == TRICKY


def test_toml_dumps_writes_plain_keys_before_tables() -> None:
    text = toml_dumps({"t": {"a": 1}, "b": 2})
    assert text == "b = 2\n\n[t]\na = 1\n"


@pytest.mark.parametrize("value", [float("nan"), float("inf"), object(), None])
def test_toml_refuses_what_it_cannot_write(value: object) -> None:
    with pytest.raises(ValueError, match=r"cannot write|not a finite"):
        toml_dumps({"x": value})


def test_read_json_object_takes_the_last_of_a_key_given_twice(tmp_path: Path) -> None:
    """What the agent itself reads (JavaScript's parser: the last one wins)."""
    path = tmp_path / "s.json"
    path.write_text('{"model": "a", "env": {"X": "1"}, "model": "b"}\n', encoding="utf-8")
    assert read_json_object(path) == {"model": "b", "env": {"X": "1"}}
