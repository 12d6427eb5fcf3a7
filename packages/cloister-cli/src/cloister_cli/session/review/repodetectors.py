"""The detector for repositories the agent left inside the work tree.

A nested repository is only reported when it would run code or read outside the
project (an ordinary clone is not), and said to be entered by the human's git in the
project when the human's index has a gitlink at its path (``git status`` recurses).
In a project without git, a ``.git`` at the top is the agent's too: reported alike.
"""

from __future__ import annotations

from dataclasses import dataclass

from cloister_cli.session.review.configkeys import classify
from cloister_cli.session.review.files import Entry, digest, lexical_target, shorten
from cloister_cli.session.review.findings import SEVERITY_ORDER, Finding, Fix, Severity, finding
from cloister_cli.session.review.nested import NestedRepo
from cloister_cli.session.review.scan import TreeScan

ENTERS = "and your git in the project enters it: it is a gitlink in the index"
HOOK_EVENTS: dict[str, str] = {
    "pre-commit": "when you commit",
    "prepare-commit-msg": "when you commit",
    "commit-msg": "when you commit",
    "post-commit": "when you commit",
    "pre-merge-commit": "when you merge",
    "post-merge": "when you merge or pull",
    "post-checkout": "when you check out or switch branches (and on clone)",
    "pre-push": "when you push",
    "pre-rebase": "when you rebase",
    "post-rewrite": "when you amend or rebase",
    "post-index-change": "whenever git writes the index (status, add…)",
    "reference-transaction": "whenever a ref changes (commit, fetch, checkout…)",
    "pre-auto-gc": "when git collects garbage on its own",
    "fsmonitor-watchman": "whenever you run git status, diff or add (if core.fsmonitor names it)",
}


@dataclass(frozen=True, slots=True)
class Reason:
    """One thing a nested repository makes git do."""

    severity: Severity
    text: str  # a whole clause: "git runs `x` (core.pager) whenever … in sub/"
    identity: str  # what the fingerprint covers


def quarantine_fix(scan: TreeScan, entry: Entry, what: str) -> Fix:
    relative = scan.places.stash(entry.path)
    return Fix("quarantine", entry.path, f"move {what} to the quarantine", relative)


def _hook_reasons(repo: NestedRepo, where: str) -> list[Reason]:
    reasons = []
    for hook in repo.hooks:
        name = hook.path.name
        when = HOOK_EVENTS.get(name, f"when git runs the `{name}` hook")
        if hook.kind == "symlink":
            what = f"its hook {name} (a link to {hook.link})"
        else:
            first = next((line for line in hook.lines if not line.startswith("#!")), "")
            what = f"its hook {name} (`{shorten(first, 60)}`…)" if first else f"its hook {name}"
        reasons.append(
            Reason("runs-code", f"git runs {what} {when} in {where}", hook.content_digest)
        )
    return reasons


def _config_reasons(scan: TreeScan, repo: NestedRepo, where: str) -> list[Reason]:
    reasons = []
    worktree = str(scan.places.worktree)
    repo_worktree = str(scan.places.worktree / repo.relative)
    for config in repo.configs:
        if config.parsed is None:
            continue  # a link or not a file: a finding of its own
        if config.parsed.error is not None:
            reasons.append(
                Reason(
                    "review",
                    f"git cannot parse its {config.name} ({config.parsed.error}) in {where}",
                    config.entry.content_digest,
                )
            )
            continue
        for key, value in config.parsed.entries:
            hit = classify(
                key,
                value,
                git_dir=str(repo.git_dir),
                worktree=worktree,
                repo_worktree=repo_worktree,
            )
            if hit is not None:
                reasons.append(Reason(hit.severity, hit.describe(where), f"{key}={value}"))
    return reasons


def _reasons(scan: TreeScan, repo: NestedRepo, where: str) -> list[Reason]:
    reasons: list[Reason] = []
    if not repo.git_dir_inside:
        shape = "a gitfile" if repo.dotgit_kind == "gitfile" else "a symbolic link"
        reasons.append(
            Reason(
                "reads-outside",
                f"its .git is {shape} to {repo.git_dir}: git reads that directory's config, "
                f"hooks and objects whenever you run git in {where}",
                f"{repo.dotgit_kind}:{repo.pointer}",
            )
        )
    reasons.extend(_config_reasons(scan, repo, where))
    reasons.extend(_hook_reasons(repo, where))
    if repo.commondir is not None:
        text = repo.commondir.text.strip() if repo.commondir.kind == "file" else ""
        reasons.append(
            Reason(
                "reads-outside",
                f"its commondir sends git to `{shorten(text or '?', 80)}` for config, hooks and "
                f"objects whenever you run git in {where}",
                repo.commondir.content_digest,
            )
        )
    return reasons


def _special_configs(scan: TreeScan, repo: NestedRepo, fix: Fix) -> list[Finding]:
    """A config that is a link or no regular file: never read, reported on its own."""
    found = []
    for config in repo.configs:
        if config.parsed is not None:
            continue
        entry = config.entry
        path = repo.below(f".git/{config.name}")
        if entry.kind == "symlink":
            target = lexical_target(entry.path, entry.link or "")
            severity: Severity = "reads-outside"
            summary = (
                f"{path} is a symbolic link: git reads {target} as that repository's "
                f"{config.name} whenever you run git in {repo.where}"
            )
        elif entry.kind == "file":
            severity = "review"
            summary = f"{path} could not be read ({entry.error or 'larger than 1 MiB'})"
        else:
            severity = "review"
            summary = f"{path} is a {entry.kind}, not a file: git blocks on it or fails"
        found.append(
            finding(
                "nested-repository",
                path,
                severity,
                summary,
                content=entry.content_digest,
                details=(f"link text: {entry.link}",) if entry.link is not None else (),
                fix=fix,
            )
        )
    return found


def detect_nested_repositories(scan: TreeScan) -> list[Finding]:
    found: list[Finding] = []
    for repo in scan.nested:
        where = repo.where
        gitlinked = repo.relative in scan.gitlinks
        fix = quarantine_fix(scan, repo.dotgit, repo.below(".git"))
        found.extend(_special_configs(scan, repo, fix))
        reasons = sorted(_reasons(scan, repo, where), key=lambda r: SEVERITY_ORDER[r.severity])
        if not reasons:
            continue
        summary = reasons[0].text
        if gitlinked:
            summary += f"; {ENTERS}"
        if len(reasons) > 1:
            summary += f" (and {len(reasons) - 1} more, see details)"
        found.append(
            finding(
                "nested-repository",
                where,
                reasons[0].severity,
                summary,
                content=digest(str(gitlinked), *sorted(r.identity for r in reasons)),
                details=[r.text for r in reasons] + ([ENTERS] if gitlinked else []),
                fix=fix,
            )
        )
    return found
