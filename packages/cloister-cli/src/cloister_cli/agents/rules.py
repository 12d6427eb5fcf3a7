"""The instructions every agent reads about its cloister (its CLAUDE.md, AGENTS.md, GEMINI.md).

An agent that does not know where it is wastes its time and the human's: it retries a
held request, pipes into ``hostexec``, or works outside ``/work`` and loses the work.
The text says what the sandbox is and how to ask for more, in plain words; it is
written into the agent's global instructions file at every start (the project's own
instruction files in ``/work`` still apply on top).
"""

from __future__ import annotations

from collections.abc import Sequence


def _code(text: str) -> str:
    """*text* as a Markdown code span, whatever backticks it holds."""
    fence = "`"
    while fence in text:
        fence += "`"
    padding = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{padding}{text}{padding}{fence}"


def _patterns(patterns: Sequence[str]) -> list[str]:
    return [f"  - {_code(pattern)}" for pattern in patterns] or ["  - (none)"]


def rules_text(
    *,
    cloister: str,
    project: str,
    refs: Sequence[str],
    hostexec_auto: Sequence[str],
    hostexec_manual: Sequence[str],
) -> str:
    """The rules for cloister *cloister* of *project*.

    *refs* are the names under ``/refs``; *hostexec_auto* and *hostexec_manual* the
    regular expressions of ``hostexec.auto_approve`` and ``manual_approve`` in effect.
    """
    ref_lines = [f"  - {_code('/refs/' + name)}" for name in refs] or ["  - (none)"]
    lines = [
        "# Working in a cloister",
        "",
        f"You run unattended in the cloister {_code(cloister)} of the project {_code(project)}:"
        " a container that is your sandbox. Nobody approves your steps one by one;"
        " a human reviews what you leave, like a pull request.",
        "",
        "## Files",
        "",
        "- Your project is `/work`, a git repository. Work there; committing is fine."
        " Only `/work` is kept: anything you write elsewhere is lost when the cloister stops.",
        "- Its git directory is this cloister's own: your commits reach the human's"
        f" repository within seconds, as {_code(f'refs/cloister/{cloister}/<branch>')}; the human's"
        " branches show here as `host/<branch>` (merge them with `git merge host/main`)."
        " `hostexec git push origin BRANCH` pushes your BRANCH.",
        "- Other repositories, read-only (read them, do not try to change them):",
        *ref_lines,
        "",
        "## Network",
        "",
        "- HTTP and HTTPS to the internet go through the proxy in `HTTPS_PROXY`/`HTTP_PROXY`"
        " (already set: keep them). Nothing else leaves the cloister.",
        "- A domain nobody has decided on yet is held until a human allows or denies it: the"
        " request can hang until the approval timeout. Wait for it; do not retry in a loop.",
        "- An answer `403` with an `X-Cloister-Reason` header means refused: do not retry it"
        " or look for another way to the same place. Do without, or say what you needed and why.",
        "",
        "## Commands on the host",
        "",
        "- `hostexec CMD ARGS...` runs one command on the host, in this project's directory,"
        " and prints its output (for example `hostexec git fetch origin`). It is a"
        " list of arguments, not a shell: no pipes, redirections, `&&`, `;`, globs or `$VARS`.",
        "- These run at once (regular expressions the whole command must match, its"
        " arguments quoted as a POSIX shell would):",
        *_patterns(hostexec_auto),
        "- These wait for a human to approve each one:",
        *_patterns(hostexec_manual),
        "- Anything else is refused. Ask for a command only when you need the host for it.",
        "",
        "## Limits",
        "",
        "- Do not try to get around the sandbox: the proxy, the read-only mounts, `hostexec`"
        " approvals or the credentials. If something you need is blocked, say so in your answer.",
        "- Leave `/work` in a state you can explain, and say what you changed.",
        "",
    ]
    return "\n".join(lines)
