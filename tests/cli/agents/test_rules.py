"""The rules every agent reads about its cloister."""

from __future__ import annotations

from cloister_cli.agents.rules import rules_text


def test_rules_say_where_to_work_and_how_to_ask() -> None:
    text = rules_text(
        cloister="my-api-feature",
        project="my-api",
        refs=["shared-lib", "docs"],
        hostexec_auto=["git status", "git (log|diff)( .*)?"],
        hostexec_manual=["git push( .*)?"],
    )
    for needle in (
        "`my-api-feature`",
        "`my-api`",
        "`/work`",
        "git repository",
        "`/refs/shared-lib`",
        "`/refs/docs`",
        "read-only",
        "HTTPS_PROXY",
        "approval timeout",
        "`403`",
        "`X-Cloister-Reason`",
        "`hostexec CMD ARGS...`",
        "not a shell",
        "`git status`",
        "`git (log|diff)( .*)?`",
        "`git push( .*)?`",
        "Do not try to get around the sandbox",
        "reviews",
    ):
        assert needle in text, needle
    assert (
        text.index("`git status`") < text.index("wait for a human") < text.index("`git push( .*)?`")
    )


def test_rules_without_refs_or_patterns() -> None:
    text = rules_text(cloister="c", project="p", refs=[], hostexec_auto=[], hostexec_manual=[])
    assert text.count("(none)") == 3
    assert "/refs/" not in text


def test_a_pattern_with_backticks_stays_one_code_span() -> None:
    text = rules_text(
        cloister="c", project="p", refs=[], hostexec_auto=["echo `x`"], hostexec_manual=["a``b"]
    )
    assert "`` echo `x` ``" in text
    assert "```a``b```" in text
