"""The approval page's ergonomics in a real browser (Debian's Chromium, Playwright).

Nothing moves under the pointer after a decision; the scopes are explained; countdowns
read m:ss; no formatting backticks; commands approved for the session or the project
and undone from the page; session decisions undone; requests grouped by cloister;
opt-in desktop notifications; no sideways scrolling on a phone; dark mode; and
screenshots at 1280 and 390 px, light and dark, kept as test artifacts.
"""

from __future__ import annotations

import re
import time
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, expect

from cloister_core.config import load_decision_file
from cloister_core.config.models import RuleEntry
from tests.approval import browser_support as support
from tests.approval.browser_support import (
    LONG_POLL_SECONDS,
    RunningHub,
    domain_item,
    human_client,
    live_page,
    serve_hub,
    submit_command,
    submit_domain,
)

pytestmark = pytest.mark.browser

# The shared fixtures (see browser_support), bound here for pytest.
playwright_driver = support.playwright_driver
browser = support.browser
calls = support.calls
hub = support.hub
page = support.page
artifacts_dir = support.artifacts_dir

PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1280, "height": 900}

# What is under a point of the viewport, sampled on every frame for *ms* milliseconds:
# the button there (its label and action) and the list item it belongs to.
SAMPLE_UNDER_POINT = """
([x, y, ms]) => new Promise((resolve) => {
  const seen = [];
  const start = performance.now();
  function sample() {
    const element = document.elementFromPoint(x, y);
    const button = element && element.closest("button");
    const item = element && element.closest("li.item, li.settled");
    seen.push({
      label: button ? button.getAttribute("aria-label") || button.textContent : null,
      action: button ? button.dataset.action || null : null,
      item: item ? item.id : null,
    });
    if (performance.now() - start < ms) requestAnimationFrame(sample);
    else resolve(seen);
  }
  sample();
})
"""


def session_file(hub: RunningHub, cloister: str) -> Path:
    return hub.config_dir / "decisions" / "sessions" / f"{cloister}.yaml"


def project_file(hub: RunningHub, project: str) -> Path:
    return hub.config_dir / "decisions" / "projects" / f"{project}.yaml"


def approved_commands(path: Path) -> list[str]:
    return [entry.pattern for entry in load_decision_file(path).hostexec.auto_approve]


def decide_everything(hub: RunningHub) -> None:
    """Release every long poll still held (deny once), so the test ends promptly."""
    with human_client(hub) as client:
        pending = client.get("/api/v1/pending").raise_for_status().json()
        for kind in ("domain", "command"):
            for item in pending[f"{kind}s"]:
                client.post(
                    f"/api/v1/{kind}s/{item['id']}/decision",
                    json={"action": "deny", "scope": "once"},
                )


def rgb(color: str) -> tuple[int, int, int]:
    match = re.fullmatch(r"rgba?\((\d+), (\d+), (\d+)(?:, [\d.]+)?\)", color)
    assert match is not None, color
    red, green, blue = (int(part) for part in match.groups())
    return red, green, blue


def luminance(color: str) -> float:
    red, green, blue = rgb(color)
    return (0.2126 * red + 0.7152 * green + 0.0722 * blue) / 255


# -- 1. nothing moves under the pointer -------------------------------------------------


def test_after_a_click_the_next_request_does_not_slide_under_the_pointer(
    page: Page, hub: RunningHub, calls: ThreadPoolExecutor
) -> None:
    first = submit_domain(calls, hub, "one.example.com")
    expect(domain_item(page, "one.example.com")).to_have_count(1)
    second = submit_domain(calls, hub, "two.example.org")  # below it, same layout
    expect(domain_item(page, "two.example.org")).to_have_count(1)
    first_id = domain_item(page, "one.example.com").get_attribute("id")

    button = page.get_by_role("button", name="Allow one.example.com (session)")
    box = button.bounding_box()
    assert box is not None
    x, y = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
    page.mouse.click(x, y)
    samples: list[dict[str, Any]] = page.evaluate(SAMPLE_UNDER_POINT, [x, y, 1500])

    assert first.result(LONG_POLL_SECONDS)["scope"] == "session"
    assert len(samples) > 20
    others = [s for s in samples if s["action"] and s["item"] != first_id]
    assert not others, f"another request's button came under the pointer: {others[0]}"
    assert samples[-1]["item"] == first_id  # still the decided card: it kept its place

    # The decided card says what was done, with Undo, in the same place.
    card = page.locator(f"#{first_id}")
    expect(card).to_have_class(re.compile(r"\bsettled\b"))
    expect(card.locator(".summary")).to_have_text(
        "Allowed one.example.com for the session of alpha"
    )
    expect(card.get_by_role("button", name=re.compile(r"^Undo: "))).to_be_visible()
    page.wait_for_timeout(500)
    expect(card).to_have_count(1)  # the pointer is still over the list: it stays

    page.mouse.move(5, 5)  # away from the list: now the cards may close up
    expect(card).to_have_count(0)
    expect(page.locator("#pending li")).to_have_count(1)
    page.get_by_role("button", name="Deny two.example.org (once)").click()
    assert second.result(LONG_POLL_SECONDS)["action"] == "deny"


def test_a_double_click_on_a_decision_does_not_undo_it(
    page: Page, hub: RunningHub, calls: ThreadPoolExecutor
) -> None:
    decided = submit_domain(calls, hub, "double.example.com")
    item = domain_item(page, "double.example.com")
    item_id = item.get_attribute("id")
    item.get_by_role("button", name="Allow double.example.com (project)").dblclick()
    assert decided.result(LONG_POLL_SECONDS)["scope"] == "project"
    card = page.locator(f"#{item_id}")
    expect(card.locator(".summary")).to_have_text("Allowed double.example.com for project webshop")
    page.wait_for_timeout(700)
    expect(card).not_to_have_class(re.compile(r"\bundone\b"))
    assert (
        RuleEntry(domain="double.example.com")
        in load_decision_file(project_file(hub, "webshop")).allow
    )


# -- 2. the scopes, explained ------------------------------------------------------------


def test_the_scopes_are_explained_in_the_page_and_on_every_button(
    page: Page, hub: RunningHub, calls: ThreadPoolExecutor
) -> None:
    legend = page.locator("dl.legend")
    expect(legend.locator("dt")).to_have_text(["once", "session", "project", "global"])
    expect(legend.locator("dd")).to_have_text(
        [
            "this request only",
            "until this cloister stops",
            "every cloister of this project, written to decisions/projects/<project>.yaml",
            "every project, written to decisions/global.yaml (domains)",
        ]
    )

    waiting = [
        submit_domain(calls, hub, "docs.example.com", cloister="alpha", project="webshop"),
        submit_command(calls, hub, ["make", "deploy"], "/srv/app", cloister="alpha"),
    ]
    expect(page.locator("li.item")).to_have_count(2)
    descriptions = {
        "Allow docs.example.com (once)": "Allow this request only: the next connection asks again",
        "Allow docs.example.com (session)": "Allow until cloister alpha stops"
        " (decisions/sessions/alpha.yaml)",
        "Deny docs.example.com (project)": "Block for every cloister of project webshop"
        " (decisions/projects/webshop.yaml)",
        "Deny docs.example.com (global)": "Block for every project (decisions/global.yaml)",
        "Approve make deploy (once)": "Run it this time only: the next run asks again",
        "Approve make deploy (session)": "Run this exact command without asking until"
        " cloister alpha stops (decisions/sessions/alpha.yaml)",
        "Approve make deploy (project)": "Run this exact command without asking in every"
        " cloister of project webshop (decisions/projects/webshop.yaml)",
        "Deny make deploy": "Refuse it this time (a denial is always once: the next run"
        " asks again)",
    }
    for name, description in descriptions.items():
        expect(page.get_by_role("button", name=name, exact=True)).to_have_accessible_description(
            description
        )
    keys = page.locator(".keys")
    for text in ("approve a command once / for the session; deny it", "globally (domains only)"):
        expect(keys).to_contain_text(text)
    decide_everything(hub)
    for future in waiting:
        assert future.result(LONG_POLL_SECONDS)["action"] in ("deny", "timeout")


# -- 3. countdowns in m:ss ---------------------------------------------------------------


def test_countdowns_read_minutes_and_seconds(
    browser: Browser, calls: ThreadPoolExecutor, tmp_path: Path
) -> None:
    with (
        serve_hub(tmp_path, command_timeout=timedelta(minutes=13)) as running,
        live_page(browser, running) as opened,
    ):
        waiting = [
            submit_domain(calls, running, "tick.example.com"),
            submit_command(calls, running, ["make", "release"], "/srv/app"),
        ]
        domain = opened.locator("li.item.domain .countdown")
        command = opened.locator("li.item.command .countdown")
        expect(domain).to_have_text(re.compile(r"^0:[0-5]\d$"))  # "0:58"
        expect(command).to_have_text(re.compile(r"^12:[0-5]\d$"))  # "12:58"
        assert "s left" not in opened.locator("#pending").inner_text()
        decide_everything(running)
        for future in waiting:
            assert future.result(LONG_POLL_SECONDS)["action"] == "deny"


# -- 4 and 5. commands for the session and the project; undo; no backticks ------------------


def test_a_command_can_be_approved_for_the_session_or_the_project_and_undone(
    page: Page, hub: RunningHub, calls: ThreadPoolExecutor
) -> None:
    session = submit_command(calls, hub, ["git", "push", "origin", "main"], "/home/me/api")
    item = page.locator("li.item.command")
    expect(item).to_have_count(1)
    item.get_by_role("button", name="Approve git push origin main (session)").click()
    assert session.result(LONG_POLL_SECONDS) == {"action": "approve", "reason": None}
    assert approved_commands(session_file(hub, "alpha")) == ["^git push origin main$"]
    record = page.locator("#decisions li.decision").first
    expect(record.locator(".summary")).to_have_text(
        "Approved git push origin main for the session of alpha, in /home/me/api"
    )
    record.get_by_role("button", name=re.compile(r"^Undo: ")).click()
    expect(record).to_have_class(re.compile(r"\bundone\b"))
    assert approved_commands(session_file(hub, "alpha")) == []

    # The keyboard: p approves the selected command for the project, u undoes it.
    project = submit_command(calls, hub, ["npm", "test"], "/home/me/api")
    expect(item).to_have_count(1)
    expect(item).to_be_focused()
    page.keyboard.press("p")
    assert project.result(LONG_POLL_SECONDS)["action"] == "approve"
    assert approved_commands(project_file(hub, "webshop")) == ["^npm test$"]
    latest = page.locator("#decisions li.decision").first
    expect(latest.locator(".summary")).to_have_text(
        "Approved npm test for project webshop, in /home/me/api"
    )
    page.keyboard.press("u")
    expect(latest).to_have_class(re.compile(r"\bundone\b"))
    assert approved_commands(project_file(hub, "webshop")) == []

    # Y: for the session; undone from the decided card itself, in place.
    again = submit_command(calls, hub, ["make", "lint"], "/home/me/api")
    expect(item).to_have_count(1)
    item_id = item.get_attribute("id")
    page.keyboard.press("Shift+Y")
    assert again.result(LONG_POLL_SECONDS)["action"] == "approve"
    assert approved_commands(session_file(hub, "alpha")) == ["^make lint$"]
    card = page.locator(f"#{item_id}")
    expect(card.locator(".summary")).to_have_text(
        "Approved make lint for the session of alpha, in /home/me/api"
    )
    page.wait_for_timeout(700)  # the card's Undo ignores a double click's second half
    card.get_by_role("button", name=re.compile(r"^Undo: ")).click()
    expect(card.locator(".summary")).to_have_text(re.compile(r"^Undone: Approved make lint"))
    assert approved_commands(session_file(hub, "alpha")) == []

    # A denial is always once: no scope buttons on that side.
    denied = submit_command(calls, hub, ["rm", "-rf", "/"], "/")
    expect(item).to_have_count(1)
    expect(item.get_by_role("group", name="Deny rm -rf /").get_by_role("button")).to_have_count(1)
    page.keyboard.press("Shift+O")
    assert denied.result(LONG_POLL_SECONDS)["action"] == "deny"


def test_a_session_decision_on_a_domain_can_be_undone(
    page: Page, hub: RunningHub, calls: ThreadPoolExecutor
) -> None:
    allowed = submit_domain(calls, hub, "docs.example.org", cloister="alpha")
    blocked = submit_domain(calls, hub, "ads.example.com", cloister="alpha")
    domain_item(page, "docs.example.org").get_by_role(
        "button", name="Allow docs.example.org (session)"
    ).click()
    assert allowed.result(LONG_POLL_SECONDS)["scope"] == "session"
    item = domain_item(page, "ads.example.com")
    item.get_by_role("checkbox", name=re.compile("wildcard")).check()
    item.get_by_role("button", name="Deny ads.example.com (session)").click()
    assert blocked.result(LONG_POLL_SECONDS)["scope"] == "session"
    written = load_decision_file(session_file(hub, "alpha"))
    assert RuleEntry(domain="docs.example.org") in written.allow
    assert RuleEntry(pattern="*.example.com") in written.deny

    records = page.locator("#decisions li.decision")
    expect(records).to_have_count(2)
    expect(records.locator(".summary")).to_have_text(
        [
            "Blocked *.example.com for the session of alpha",
            "Allowed docs.example.org for the session of alpha",
        ]
    )
    expect(records.get_by_role("button", name=re.compile(r"^Undo: "))).to_have_count(2)
    records.nth(1).get_by_role("button", name=re.compile(r"^Undo: ")).click()
    expect(records.nth(1)).to_have_class(re.compile(r"\bundone\b"))
    records.first.get_by_role("button", name=re.compile(r"^Undo: ")).click()
    expect(records.first).to_have_class(re.compile(r"\bundone\b"))
    after = load_decision_file(session_file(hub, "alpha"))
    assert not after.allow
    assert not after.deny


def test_no_backticks_in_any_decision_text(
    page: Page, hub: RunningHub, calls: ThreadPoolExecutor
) -> None:
    scopes = ("once", "session", "project", "global")
    for index, scope in enumerate(scopes):
        host = f"h{index}.example.com"
        waiting = submit_domain(calls, hub, host)
        domain_item(page, host).get_by_role("button", name=f"Allow {host} ({scope})").click()
        assert waiting.result(LONG_POLL_SECONDS)["action"] == "allow"
    for scope in ("once", "session", "project"):
        argv = ["make", f"target-{scope}"]
        waiting = submit_command(calls, hub, argv, "/srv/app")
        name = f"Approve make target-{scope} ({scope})"
        page.locator("li.item.command").get_by_role("button", name=name).click()
        assert waiting.result(LONG_POLL_SECONDS)["action"] == "approve"
    denied = submit_command(calls, hub, ["make", "clean"], "/srv/app")
    command = page.locator("li.item.command")
    command.get_by_role("textbox", name="reason").fill("not now")
    command.get_by_role("button", name="Deny make clean").click()
    assert denied.result(LONG_POLL_SECONDS)["action"] == "deny"
    page.locator("#decisions button.undo").first.click()
    expect(page.locator("#decisions li.decision.undone")).to_have_count(1)

    expect(page.locator("#decisions li.decision")).to_have_count(8)
    for text in (
        page.locator("#decisions").inner_text(),
        page.locator("#pending").inner_text(),  # the decided cards, still in place
        page.locator("#connection").inner_text(),
    ):
        assert "`" not in text, text
    page.reload()  # and as the server renders them
    expect(page.locator("#decisions li.decision")).to_have_count(8)
    assert "`" not in page.locator("#decisions").inner_text()


# -- 7. grouped by cloister ----------------------------------------------------------------


def test_pending_requests_are_grouped_by_cloister_with_the_project(
    page: Page, hub: RunningHub, calls: ThreadPoolExecutor
) -> None:
    waiting = [submit_domain(calls, hub, "a1.example.com", cloister="alpha", project="webshop")]
    expect(page.locator("li.item")).to_have_count(1)
    waiting.append(submit_domain(calls, hub, "b1.example.com", cloister="beta", project="blog"))
    expect(page.locator("li.item")).to_have_count(2)
    waiting.append(submit_command(calls, hub, ["make", "test"], "/srv/a", cloister="alpha"))
    expect(page.locator("li.item")).to_have_count(3)

    def check() -> None:
        groups = page.locator("#pending section.cloister")
        expect(groups).to_have_count(2)
        expect(groups.get_by_role("heading", level=3)).to_have_text(
            ["alpha project webshop", "beta project blog"]
        )
        alpha = page.get_by_role("region", name="cloister alpha, project webshop")
        expect(alpha.locator("li.item")).to_have_count(2)
        expect(alpha.locator("li.item").first).to_have_attribute("data-kind", "domain")
        expect(alpha.locator("li.item").nth(1)).to_have_attribute("data-kind", "command")
        beta = page.get_by_role("region", name="cloister beta, project blog")
        expect(beta.locator("code.target")).to_have_text("b1.example.com:443")
        expect(page.locator('[data-count="domain"]')).to_have_text("2")
        expect(page.locator('[data-count="command"]')).to_have_text("1")

    check()  # grown live
    page.reload()
    check()  # rendered by the server
    page.get_by_role("button", name="Deny b1.example.com (once)").click()
    assert waiting[1].result(LONG_POLL_SECONDS)["action"] == "deny"
    page.mouse.move(5, 5)
    expect(page.locator("#pending section.cloister")).to_have_count(1)  # beta's is gone
    decide_everything(hub)
    expect(page.locator("[data-empty]")).to_be_visible()
    for future in waiting:
        assert future.result(LONG_POLL_SECONDS)["action"] == "deny"


# -- 8. desktop notifications ----------------------------------------------------------------

# Records each Notification the page makes (permission and its request stay the real
# browser's), and puts another window in front, as when the human works elsewhere.
RECORD_NOTIFICATIONS = """
(() => {
  const Real = window.Notification;
  window.madeNotifications = [];
  class Recorded {
    constructor(title, options) {
      window.madeNotifications.push({ title, body: (options || {}).body || "" });
    }
    static get permission() { return Real.permission; }
    static requestPermission() { return Real.requestPermission(); }
  }
  window.Notification = Recorded;
  document.hasFocus = () => false;
})();
"""


def wait_for_notifications(page: Page, count: int) -> None:
    # (not wait_for_function: it evaluates a string, which the page's CSP forbids)
    deadline = time.monotonic() + 10
    while page.evaluate("window.madeNotifications.length") < count:
        assert time.monotonic() < deadline, "no notification was made"
        page.wait_for_timeout(50)


def test_desktop_notifications_are_opt_in_and_remembered(
    browser: Browser, hub: RunningHub, calls: ThreadPoolExecutor
) -> None:
    waiting: list[Future[dict[str, Any]]] = []
    with live_page(browser, hub, permissions=["notifications"]) as opened:
        opened.context.add_init_script(RECORD_NOTIFICATIONS)
        opened.reload()
        expect(opened.locator("body")).to_have_attribute("data-live", "true")
        toggle = opened.get_by_role("button", name="Desktop notifications: off")
        expect(toggle).to_have_attribute("aria-pressed", "false")  # off by default

        waiting.append(submit_domain(calls, hub, "quiet.example.com"))
        expect(domain_item(opened, "quiet.example.com")).to_have_count(1)
        opened.wait_for_timeout(200)
        assert opened.evaluate("window.madeNotifications") == []

        toggle.click()
        toggle = opened.get_by_role("button", name="Desktop notifications: on")
        expect(toggle).to_have_attribute("aria-pressed", "true")
        waiting.append(submit_domain(calls, hub, "loud.example.com", cloister="beta"))
        expect(domain_item(opened, "loud.example.com")).to_have_count(1)
        wait_for_notifications(opened, 1)
        assert opened.evaluate("window.madeNotifications") == [
            {"title": "Cloister beta asks for a domain", "body": "loud.example.com:443"}
        ]

        opened.reload()  # remembered in this browser
        expect(opened.locator("body")).to_have_attribute("data-live", "true")
        expect(opened.get_by_role("button", name="Desktop notifications: on")).to_be_visible()
        waiting.append(submit_command(calls, hub, ["make", "all"], "/srv/app"))
        wait_for_notifications(opened, 1)
        assert opened.evaluate("window.madeNotifications")[0] == {
            "title": "Cloister alpha asks for a command",
            "body": "make all\nin /srv/app",
        }
        opened.get_by_role("button", name="Desktop notifications: on").click()
        expect(opened.get_by_role("button", name="Desktop notifications: off")).to_be_visible()
        decide_everything(hub)
    for future in waiting:
        assert future.result(LONG_POLL_SECONDS)["action"] == "deny"


# -- 9 to 11. a phone, dark mode, screenshots --------------------------------------------------

LONG_HOST = (
    "a-very-long-subdomain-label-that-goes-on-and-on-and-on-for-ever-x"[:63]
    + ".another-rather-long-label-of-the-same-kind.example-with-a-long-name.com"
)
LONG_ARGV = [
    "python3",
    "-c",
    "import sys; print(" + "'x' * 40 + " * 8 + "'end')",
    "--output=/home/dev/" + "nested-directory/" * 8 + "result.json",
]
LONG_CWD = "/home/dev/" + "a-rather-deeply-nested-directory/" * 5


def fill_the_page(page: Page, hub: RunningHub, calls: ThreadPoolExecutor) -> list[Future[Any]]:
    """A page with what a human sees on a busy day: two cloisters, one decision made."""
    decided = submit_domain(calls, hub, "packages.example.net")
    item = domain_item(page, "packages.example.net")
    item.get_by_role("checkbox", name=re.compile("wildcard")).check()
    item.get_by_role("button", name="Allow packages.example.net (project)").click()
    assert decided.result(LONG_POLL_SECONDS)["action"] == "allow"
    page.mouse.move(1, 1)
    expect(page.locator("#pending li.settled")).to_have_count(0)
    waiting = [
        submit_domain(calls, hub, "api.github.com", cloister="alpha-2", project="webshop"),
        submit_domain(calls, hub, LONG_HOST, cloister="alpha-2", project="webshop", port=8443),
        submit_command(calls, hub, LONG_ARGV, LONG_CWD, cloister="alpha-2", project="webshop"),
        submit_command(
            calls, hub, ["gh", "pr", "create", "--title", "Fix the build"], "/home/dev/blog",
            cloister="blog-1", project="blog",
        ),
    ]  # fmt: skip
    expect(page.locator("li.item")).to_have_count(4)
    return waiting


def test_no_horizontal_scroll_on_a_phone(
    browser: Browser, hub: RunningHub, calls: ThreadPoolExecutor
) -> None:
    with live_page(browser, hub, viewport=PHONE) as phone:
        waiting = fill_the_page(phone, hub, calls)
        expect(domain_item(phone, LONG_HOST)).to_have_count(1)
        width = phone.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
        assert width[0] <= width[1], f"scrolls sideways: {width}"
        for selector in ("li.item", "#decisions li", "header", ".legend"):
            for box in (e.bounding_box() for e in phone.locator(selector).all()):
                assert box is not None
                assert box["x"] >= 0
                assert box["x"] + box["width"] <= PHONE["width"] + 0.5, (selector, box)
        decide_everything(hub)
    for future in waiting:
        assert future.result(LONG_POLL_SECONDS)["action"] == "deny"


def test_dark_mode_follows_the_system_setting(
    browser: Browser, hub: RunningHub, calls: ThreadPoolExecutor
) -> None:
    backgrounds = {}
    for scheme in ("light", "dark"):
        with live_page(browser, hub, color_scheme=scheme) as opened:
            body = opened.locator("body")
            backgrounds[scheme] = body.evaluate("e => getComputedStyle(e).backgroundColor")
            ink = body.evaluate("e => getComputedStyle(e).color")
            if scheme == "dark":
                assert luminance(backgrounds[scheme]) < 0.15, backgrounds
                assert luminance(ink) > 0.8, ink
            else:
                assert luminance(backgrounds[scheme]) > 0.9, backgrounds
                assert luminance(ink) < 0.2, ink
    assert backgrounds["light"] != backgrounds["dark"]


def test_screenshots_at_1280_and_390_light_and_dark(
    browser: Browser, hub: RunningHub, calls: ThreadPoolExecutor, artifacts_dir: Path
) -> None:
    waiting: list[Future[Any]] = []
    shots = []
    for width, viewport in (("1280", DESKTOP), ("390", PHONE)):
        for scheme in ("light", "dark"):
            with live_page(browser, hub, viewport=viewport, color_scheme=scheme) as opened:
                if not waiting:
                    waiting = fill_the_page(opened, hub, calls)
                expect(opened.locator("li.item")).to_have_count(4)
                expect(opened.locator("#decisions li.decision")).to_have_count(1)
                expect(opened.locator("li.item .countdown").first).to_have_text(
                    re.compile(r"^\d+:\d\d$")
                )
                target = artifacts_dir / f"approval-ui-{width}-{scheme}.png"
                target.unlink(missing_ok=True)
                opened.screenshot(path=str(target), full_page=True)
                shots.append(target)
    decide_everything(hub)
    for future in waiting:
        assert future.result(LONG_POLL_SECONDS)["action"] == "deny"
    for target in shots:
        assert target.is_file()
        assert target.stat().st_size > 1000
        assert target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# -- the cloister filter, and who decided ------------------------------------------------


def test_the_filter_shows_one_cloisters_requests_and_history(
    page: Page, hub: RunningHub, calls: ThreadPoolExecutor
) -> None:
    alpha = submit_domain(calls, hub, "alpha-first.example.com", cloister="alpha")
    beta = submit_domain(calls, hub, "beta-first.example.com", cloister="beta")
    expect(page.locator("li.item.domain")).to_have_count(2)
    choices = page.get_by_role("combobox", name="Show the requests and decisions of")
    expect(choices.locator("option")).to_have_text(["all cloisters", "alpha", "beta"])

    choices.select_option("beta")
    expect(page).to_have_url(re.compile(r"/\?cloister=beta$"))
    expect(page.locator("li.item.domain")).to_have_count(1)
    expect(domain_item(page, "beta-first.example.com")).to_have_count(1)
    expect(page).to_have_title("(2) Cloister approvals")  # every cloister's, still
    expect(page.locator('[data-count="domain"]')).to_have_text("1")

    # An arriving request of another cloister is not shown (but counted in the title).
    gamma = submit_domain(calls, hub, "gamma.example.com", cloister="gamma")
    expect(page).to_have_title("(3) Cloister approvals")
    expect(choices.locator("option")).to_have_text(["all cloisters", "alpha", "beta", "gamma"])
    expect(domain_item(page, "gamma.example.com")).to_have_count(0)

    domain_item(page, "beta-first.example.com").get_by_role(
        "button", name="Deny beta-first.example.com (once)"
    ).click()
    assert beta.result(LONG_POLL_SECONDS)["action"] == "deny"
    with human_client(hub) as client:
        for item in client.get("/api/v1/pending").json()["domains"]:
            client.post(
                f"/api/v1/domains/{item['id']}/decision", json={"action": "allow", "scope": "once"}
            ).raise_for_status()
    assert alpha.result(LONG_POLL_SECONDS)["action"] == "allow"
    assert gamma.result(LONG_POLL_SECONDS)["action"] == "allow"
    history = page.locator("#decisions li.decision")
    expect(history).to_have_count(1)  # beta's only
    expect(history.locator(".summary")).to_have_text("Blocked beta-first.example.com once")
    expect(history.locator(".by")).to_have_text(re.compile(r"^by browser:[0-9a-f]{16}$"))

    # A reload keeps the filter (it is in the address); "all cloisters" shows everything.
    page.reload()
    expect(page.locator("body")).to_have_attribute("data-live", "true")
    expect(history).to_have_count(1)
    choices.select_option("")
    expect(page).to_have_url(re.compile(r"/$"))
    expect(history).to_have_count(3)
    expect(history.locator(".by", has_text="by cli")).to_have_count(2)
