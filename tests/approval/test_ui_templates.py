"""The page's templates, rendered without a browser: grouping, scope help, escaping."""

from __future__ import annotations

import re
from typing import Any

from cloister_approval.broadcast import Event
from cloister_approval.ui import Renderer, _groups, template_environment

renderer = Renderer(template_environment())


def domain(cloister: str, host: str, created: str, **extra: Any) -> dict[str, Any]:
    return {
        "id": f"d-{host}",
        "kind": "domain",
        "cloister": cloister,
        "project": extra.pop("project", "webshop"),
        "host": host,
        "port": 443,
        "created_at": f"2025-01-01T10:00:{created}Z",
        "expires_at": "2025-01-01T10:01:00Z",
        "wildcard": None,
        "waiting": 1,
    }


def command(cloister: str, argv: list[str], created: str) -> dict[str, Any]:
    return {
        "id": f"c-{argv[0]}",
        "kind": "command",
        "cloister": cloister,
        "project": "blog",
        "argv": argv,
        "command": " ".join(argv),
        "cwd": "/srv/<app>",
        "created_at": f"2025-01-01T10:00:{created}Z",
        "expires_at": "2025-01-01T10:05:00Z",
    }


def test_pending_requests_are_rendered_by_cloister_with_the_project() -> None:
    items = [
        domain("alpha", "a.example.com", "01"),
        command("beta", ["make", "test"], "02"),
        domain("alpha", "b.example.com", "03"),
    ]
    html = renderer.render("_pending.html", groups=_groups(items), cloister=None, total=3)
    headings = re.findall(r'<span class="name">([^<]*)</span> <span class="project">([^<]*)<', html)
    assert headings == [("alpha", "project webshop"), ("beta", "project blog")]
    alpha, beta = html.split('<section class="cloister"')[1:]
    assert alpha.index("a.example.com") < alpha.index("b.example.com")
    assert "make" in beta
    assert "a.example.com" not in beta
    assert "/srv/&lt;app&gt;" in beta
    assert ' data-empty data-total="3" hidden' in html


def test_a_filtered_empty_list_says_which_cloister() -> None:
    html = renderer.render("_pending.html", groups=[], cloister="alpha", total=4)
    assert "Nothing is waiting from alpha." in html
    assert 'data-total="4"' in html
    assert " hidden" not in html


def test_the_filter_offers_every_cloister_and_marks_the_chosen_one() -> None:
    html = renderer.render("_cloisters.html", names=["alpha", "b<c"], selected="alpha")
    options = re.findall(r'<option value="([^"]*)"( selected)?>([^<]*)</option>', html)
    assert options == [
        ("", "", "all cloisters"),
        ("alpha", " selected", "alpha"),
        ("b&lt;c", "", "b&lt;c"),
    ]
    # A cloister no longer known (its history gone) stays chosen rather than vanishing.
    html = renderer.render("_cloisters.html", names=["alpha"], selected="gone")
    assert '<option value="gone" selected>gone</option>' in html
    assert '<option value="" selected>' not in html


def test_an_arriving_item_comes_as_its_cloister_group() -> None:
    item = {k: v for k, v in domain("alpha", "new.example.com", "05").items() if k != "kind"}
    html = renderer.fragment_for(Event("domain-added", {"item": item, "pending": 1}))
    assert html is not None
    assert html.lstrip().startswith('<section class="cloister" data-cloister="alpha"')
    assert html.count('<li class="item domain"') == 1


def test_every_decision_button_says_what_its_scope_means() -> None:
    html = renderer.render("_domain.html", item=domain("alpha", "x.example.com", "01"))
    titles = dict(re.findall(r'aria-label="([^"]*)"\s+title="([^"]*)"', html))
    assert titles["Allow x.example.com (once)"].startswith("Allow this request only")
    assert titles["Allow x.example.com (session)"] == (
        "Allow until cloister alpha stops (decisions/sessions/alpha.yaml)"
    )
    assert titles["Deny x.example.com (project)"] == (
        "Block for every cloister of project webshop (decisions/projects/webshop.yaml)"
    )
    assert titles["Deny x.example.com (global)"] == (
        "Block for every project (decisions/global.yaml)"
    )
    html = renderer.render("_command.html", item=command("beta", ["make", "x"], "01"))
    labels = re.findall(r'aria-label="(Approve [^"]*|Deny [^"]*)"', html)
    assert labels == [
        "Approve make x",  # the group
        "Approve make x (once)",
        "Approve make x (session)",
        "Approve make x (project)",
        "Deny make x",  # the group
        "Deny make x",
    ]
    assert "until cloister beta stops (decisions/sessions/beta.yaml)" in html
    assert "every cloister of project blog (decisions/projects/blog.yaml)" in html


def test_decisions_are_rendered_without_backticks() -> None:
    decision = {
        "id": "abc",
        "action": "approve",
        "undone": False,
        "decided_at": "2025-01-01T10:00:00Z",
        "summary": "Approved git push origin main for the session of api, in /home/me/api",
        "file": "/cfg/decisions/sessions/api.yaml",
        "effective": None,
        "warning": None,
        "undoable": True,
        "cloister": "api",
        "decided_by": "browser:0123456789abcdef",
        "undone_by": None,
    }
    html = renderer.render("_decision.html", decision=decision)
    assert "`" not in html
    assert 'data-undo="abc"' in html
    assert 'data-cloister="api"' in html
    assert ">by browser:0123456789abcdef</span>" in html
    undone = renderer.render(
        "_decision.html", decision=decision | {"undone": True, "undone_by": "cli"}
    )
    assert "by browser:0123456789abcdef, undone by cli" in undone
