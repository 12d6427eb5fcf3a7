"""Which git config keys make git run a command or read a file outside the project.

A repository the agent created inside the project is harmless until the human runs
git in it, or runs git in the project and git enters it (a gitlink: ``git status``
recurses). Then git obeys that repository's config, and these keys are the ones that
name a program to run or a file to read. Keys are matched lower-cased (git lowers
section and variable names; ``*`` stands for a subsection, which may hold dots).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from cloister_cli.session.review.files import inside, shorten

Effect = Literal["runs", "reads", "loads", "allows"]

BOOLEAN_WORDS = frozenset({"false", "true", "yes", "no", "on", "off", "1", "0", ""})


@dataclass(frozen=True, slots=True)
class KeyRule:
    """A config key that names a program or a file, and when git uses it."""

    pattern: str  # lower-cased, "*" = any subsection
    effect: Effect
    when: str  # "{name}" is the key's last part before the variable, or the alias
    skip_booleans: bool = False
    value_prefix: str = ""  # only values starting with it count (alias "!")

    @property
    def regex(self) -> re.Pattern[str]:
        return re.compile("^" + ".+".join(map(re.escape, self.pattern.split("*"))) + "$")


_STATUS = "whenever you run git status, diff or add"
RULES: tuple[KeyRule, ...] = (
    KeyRule("core.fsmonitor", "runs", _STATUS, skip_booleans=True),
    KeyRule("core.hookspath", "runs", "as its hooks whenever a hook fires (commit, checkout…)"),
    KeyRule("core.sshcommand", "runs", "when you fetch or push over SSH"),
    KeyRule("core.pager", "runs", "whenever git pages its output (log, diff, show…)"),
    KeyRule("core.editor", "runs", "when git opens an editor (commit, rebase -i, tag…)"),
    KeyRule("core.askpass", "runs", "when git asks for a password"),
    KeyRule("core.gitproxy", "runs", "when you fetch over git://"),
    KeyRule("core.alternaterefscommand", "runs", "when you fetch or push"),
    KeyRule("core.worktree", "reads", "as the work tree whenever you run git"),
    KeyRule("sequence.editor", "runs", "when you run git rebase -i"),
    KeyRule("diff.external", "runs", "when you run git diff"),
    KeyRule("diff.*.command", "runs", "when you diff files with the `{name}` driver"),
    KeyRule("diff.*.textconv", "runs", "when you diff or blame files with the `{name}` driver"),
    KeyRule("merge.*.driver", "runs", "when you merge files with the `{name}` driver"),
    KeyRule("filter.*.clean", "runs", "when you add files with the `{name}` filter"),
    KeyRule("filter.*.smudge", "runs", "when you check out files with the `{name}` filter"),
    KeyRule("filter.*.process", "runs", "when you add or check out files with the `{name}` filter"),
    KeyRule("alias.*", "runs", "when you run `git {name}`", value_prefix="!"),
    KeyRule("pager.*", "runs", "when you run `git {name}`", skip_booleans=True),
    KeyRule("credential.helper", "runs", "when git needs credentials"),
    KeyRule("credential.*.helper", "runs", "when git needs credentials for {name}"),
    KeyRule("gpg.program", "runs", "when you sign or verify commits or tags"),
    KeyRule("gpg.*.program", "runs", "when you sign or verify with {name}"),
    KeyRule("gpg.ssh.defaultkeycommand", "runs", "when you sign with SSH"),
    KeyRule("gpg.ssh.allowedsignersfile", "reads", "when you verify SSH signatures"),
    KeyRule("sendemail.*cmd", "runs", "when you run git send-email"),
    KeyRule("remote.*.uploadpack", "runs", "when you fetch from `{name}`"),
    KeyRule("remote.*.receivepack", "runs", "when you push to `{name}`"),
    KeyRule("uploadpack.packobjectshook", "runs", "when something fetches from it"),
    KeyRule("include.path", "loads", "whenever you run git"),
    KeyRule("includeif.*.path", "loads", "whenever you run git and `{name}` holds"),
    KeyRule("hook.*.command", "runs", "when the `{name}` hook fires"),
    KeyRule("submodule.*.update", "runs", "when you run git submodule update", value_prefix="!"),
    KeyRule("web.browser", "runs", "when git opens a browser (help --web, instaweb)"),
    KeyRule("browser.*.cmd", "runs", "when git opens the `{name}` browser"),
    KeyRule("browser.*.path", "runs", "when git opens the `{name}` browser"),
    KeyRule("man.*.cmd", "runs", "when you run git help"),
    KeyRule("man.*.path", "runs", "when you run git help"),
    KeyRule("difftool.*.cmd", "runs", "when you run git difftool"),
    KeyRule("difftool.*.path", "runs", "when you run git difftool"),
    KeyRule("mergetool.*.cmd", "runs", "when you run git mergetool"),
    KeyRule("mergetool.*.path", "runs", "when you run git mergetool"),
    KeyRule("guitool.*.cmd", "runs", "when you use git gui"),
    KeyRule("tar.*.command", "runs", "when you run git archive"),
    KeyRule("interactive.difffilter", "runs", "when you run git add -p"),
    KeyRule("protocol.allow", "allows", "when you fetch or update submodules"),
    KeyRule("protocol.*.allow", "allows", "when you fetch or update submodules"),
    KeyRule("blame.ignorerevsfile", "reads", "when you run git blame"),
    KeyRule("commit.template", "reads", "when you commit"),
    KeyRule("core.excludesfile", "reads", _STATUS),
    KeyRule("core.attributesfile", "reads", _STATUS),
    KeyRule("mailmap.file", "reads", "when you run git log or shortlog"),
)
_COMPILED = tuple((rule, rule.regex) for rule in RULES)
# Path keys whose relative value is harmless: relative to the work tree git runs in.
_PATH_KEYS = frozenset(
    {
        "blame.ignorerevsfile",
        "commit.template",
        "core.excludesfile",
        "core.attributesfile",
        "mailmap.file",
        "gpg.ssh.allowedsignersfile",
    }
)


@dataclass(frozen=True, slots=True)
class Hit:
    """One config entry that runs something or reads something."""

    key: str
    value: str
    rule: KeyRule

    @property
    def severity(self) -> Literal["runs-code", "reads-outside"]:
        if self.rule.effect == "allows":
            # ext:: URLs are commands; file:// and the rest read other repositories.
            return "runs-code" if _name(self.key) in {"", "ext"} else "reads-outside"
        return "reads-outside" if self.rule.effect == "reads" else "runs-code"

    def describe(self, where: str) -> str:
        """ "git runs `touch x` (core.fsmonitor) whenever you run git status… in sub/"."""
        name = _name(self.key)
        when = self.rule.when.format(name=name)
        if self.rule.effect == "allows":
            which = f"`{name}` URLs" if name else "every kind of URL"
            return f"git allows {which} ({self.key} = {self.value}) {when} in {where}"
        shown = shorten(self.value[1:] if self.rule.value_prefix == "!" else self.value, 120)
        verb = {"runs": "runs", "reads": "reads", "loads": "loads config from"}.get(
            self.rule.effect, "uses"
        )
        return f"git {verb} `{shown}` ({self.key}) {when} in {where}"


def _name(key: str) -> str:
    """The subsection of ``section.sub.var`` ("" when there is none)."""
    first, _, rest = key.partition(".")
    middle, _, _ = rest.rpartition(".")
    if first in {"alias", "pager"}:
        return rest
    return middle


def classify(
    key: str, value: str | None, *, git_dir: str, worktree: str, repo_worktree: str
) -> Hit | None:
    """The rule *key* = *value* falls under, None when it runs and reads nothing outside.

    *git_dir* is the directory holding the config (``core.worktree`` is relative to
    it), *worktree* the reviewed work tree, *repo_worktree* the nested repository's own.
    """
    lowered = key.lower()
    if value is None:
        return None  # a bare key is "true": no program, no path
    for rule, regex in _COMPILED:
        if regex.match(lowered):
            benign = _benign(
                rule,
                lowered,
                value.strip(),
                git_dir=git_dir,
                worktree=worktree,
                repo_worktree=repo_worktree,
            )
            return None if benign else Hit(key, value, rule)
    return None


def _benign(
    rule: KeyRule, key: str, value: str, *, git_dir: str, worktree: str, repo_worktree: str
) -> bool:
    """Whether a matching key's value names no program and no outside file after all."""
    return (
        not value
        or (rule.skip_booleans and value.lower() in BOOLEAN_WORDS)
        or (bool(rule.value_prefix) and not value.startswith(rule.value_prefix))
        or (key.startswith("protocol.") and value.lower() == "never")
        or (key == "core.worktree" and inside(Path(git_dir) / value, worktree))
        or (key in _PATH_KEYS and _stays_inside(value, repo_worktree, worktree))
    )


def _stays_inside(value: str, base: str, worktree: str) -> bool:
    """A relative path (git resolves it in the work tree) that does not climb out."""
    if value.startswith(("~", "%(")) or Path(value).is_absolute():
        return False
    return inside(Path(base) / value, worktree)
