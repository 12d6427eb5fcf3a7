"""What the merged policy says: one line per decision, or all rules of a project.

Project and global rules are read from their files each time, so a view never shows a
stale file; a cloister's session rules come from its session file, through the
:class:`~cloister_core.watch.SessionBook` the proxy uses too.
"""

from __future__ import annotations

from collections.abc import Iterable

from cloister_approval.models import EffectiveRulesOut, RuleOut
from cloister_core.errors import CloisterError
from cloister_core.hosts import normalize_host
from cloister_core.paths import CloisterPaths
from cloister_core.policy import load_project_policy
from cloister_core.watch import SessionBook

STATES = {
    "allowed": "allowed",
    "denied": "denied",
    "port-not-allowed": "not allowed on this port",
    "unlisted": "on no list (the next request will be held again)",
}


def effective_line(
    paths: CloisterPaths,
    sessions: SessionBook,
    *,
    project: str,
    cloister: str,
    host: str,
    port: int,
) -> str:
    """One line: what the merged policy (with this cloister's session) now says."""
    try:
        policy = load_project_policy(paths, project)
    except CloisterError as error:
        return f"effective state unknown: {error}"
    verdict = policy.domains.decide(host, port, sessions.get(cloister).domains)
    where = f" by {verdict.rule.text} in {verdict.rule.source}" if verdict.rule else ""
    return f"{normalize_host(host).authority(port)} is now {STATES[verdict.reason]}{where}"


def effective_rules(
    paths: CloisterPaths, sessions: SessionBook, project: str, cloisters: Iterable[str]
) -> EffectiveRulesOut:
    """Merged rules of *project*, each with its file; then the session rules of *cloisters*."""
    policy = load_project_policy(paths, project)
    rules = [
        RuleOut(
            action=rule.action,
            rule=rule.text,
            ports=sorted(rule.ports) if rule.ports is not None else None,
            scope=rule.source.scope,
            file=str(rule.source.file) if rule.source.file else None,
        )
        for rule in policy.domains.rules()
    ]
    for cloister in sorted(set(cloisters)):
        session = sessions.get(cloister).domains
        rules.extend(
            RuleOut(
                action=rule.action,
                rule=rule.text,
                ports=sorted(rule.ports) if rule.ports is not None else None,
                scope=f"session ({cloister})",
                file=str(rule.source.file) if rule.source.file else None,
            )
            for rule in (session.rules() if session is not None else ())
        )
    proxy = policy.config.proxy
    return EffectiveRulesOut(
        project=project,
        rules=rules,
        allowed_ports=sorted(proxy.allowed_ports),
        unlisted_domain_behavior=proxy.unlisted_domain_behavior,
    )
