"""``cloister setup AGENT``: how an agent logs in, and the secret, stored for the gateway."""

from __future__ import annotations

import sys
from typing import cast

import click

from cloister_cli.agents import AGENTS, Agent, AgentSetupError
from cloister_cli.commands.output import console, note, print_json, warn
from cloister_cli.context import Context
from cloister_core import credentials
from cloister_core.credentials import METHODS, PROVIDERS, CredentialError, Method

SECRET_PROMPT = {"api-key": "API key", "oauth-token": "OAuth token"}


def _is_terminal() -> bool:
    return sys.stdin.isatty()


def _read_secret(method: Method, *, from_stdin: bool) -> str:
    if from_stdin:
        secret = sys.stdin.read().strip()
    else:
        secret = click.prompt(SECRET_PROMPT[method], hide_input=True).strip()
    if not secret:
        raise click.ClickException(f"no {SECRET_PROMPT[method]} given")
    if any(character.isspace() or not character.isprintable() for character in secret):
        raise click.ClickException(
            f"the {SECRET_PROMPT[method]} holds spaces or control characters; paste it alone"
        )
    return secret


def _ask_method(agent: Agent) -> Method:
    """The methods explained first, then the question (a number or a name)."""
    methods = list(agent.method_help)
    click.echo(f"How should {agent.title} log in?\n")
    for number, method in enumerate(methods, 1):
        click.echo(f"  {number}. {method}: {agent.method_help[method]}\n")
    numbers = [str(number) for number in range(1, len(methods) + 1)]
    answer = click.prompt("Method", type=click.Choice([*methods, *numbers]))
    return methods[int(answer) - 1] if answer in numbers else cast(Method, answer)


def _list(context: Context, as_json: bool) -> None:
    found = credentials.listing(context.paths)
    rows = [
        {
            "agent": agent,
            "method": method,
            "api_base": context.config.agents.of(agent).api_base
            or PROVIDERS[agent].default_api_base,
        }
        for agent, method in found.items()
    ]
    if as_json:
        print_json(rows)
        return
    from rich.table import Table  # noqa: PLC0415 - rich only when a table is drawn

    table = Table("agent", "method", "api_base")
    for row in rows:
        table.add_row(row["agent"], row["method"] or "(not set up)", row["api_base"])
    console().print(table)


@click.command()
@click.argument("agent", required=False, type=click.Choice(list(PROVIDERS)))
@click.option("--method", type=click.Choice(METHODS), help="How the agent logs in.")
@click.option("--secret-stdin", is_flag=True, help="Read the key or token from stdin.")
@click.option("--list", "show_list", is_flag=True, help="Show how each agent is set up.")
@click.option("--remove", is_flag=True, help="Forget AGENT's stored credential.")
@click.option("--json", "as_json", is_flag=True, help="With --list: print JSON for scripts.")
@click.pass_obj
def setup(
    context: Context,
    agent: str | None,
    method: Method | None,
    secret_stdin: bool,
    show_list: bool,
    remove: bool,
    as_json: bool,
) -> None:
    """Log an agent in: Claude Code (claude), Codex (codex) or Gemini CLI (gemini).

    Without --method it explains the methods and asks. With api-key and
    oauth-token the secret stays on this machine: the guardian's credential
    gateway adds it to the agent's API calls, and the agent never sees it.
    Running cloisters use a new key at once; a new method after a restart.

    \b
    Examples:
      cloister setup claude
      printf '%s' "$ANTHROPIC_API_KEY" | cloister setup claude --method api-key --secret-stdin
      cloister setup codex --method existing-login
      cloister setup --list
      cloister setup gemini --remove
    """
    if show_list:
        if agent or method or remove:
            raise click.UsageError("--list takes no AGENT, --method or --remove")
        _list(context, as_json)
        return
    if agent is None:
        raise click.UsageError("name the agent: cloister setup claude|codex|gemini")
    if remove:
        if method or secret_stdin:
            raise click.UsageError("--remove takes no --method or --secret-stdin")
        if not credentials.remove(context.paths, agent):
            raise click.ClickException(f"{agent} was not set up")
        click.echo(f"removed the stored credential of {agent}")
        return
    _store(context, agent, method, secret_stdin=secret_stdin)


def _store(context: Context, name: str, method: Method | None, *, secret_stdin: bool) -> None:
    agent = AGENTS[name]
    if method is None:
        if secret_stdin or not _is_terminal():
            raise click.UsageError("say --method when the input is not a terminal")
        method = _ask_method(agent)
    try:
        agent.check_method(method)
    except AgentSetupError as error:
        raise click.ClickException(str(error)) from None
    secret = None
    if method in credentials.GATEWAY_METHODS:
        secret = _read_secret(method, from_stdin=secret_stdin)
    elif secret_stdin:
        raise click.UsageError("existing-login takes no secret: it copies your login files")
    else:
        try:  # refuse now what every start would refuse
            agent.login_files(context.home)
        except AgentSetupError as error:
            raise click.ClickException(str(error)) from None
        warn(agent.method_help[method])
    try:
        path = credentials.store(context.paths, name, method, secret)
    except CredentialError as error:
        raise click.ClickException(str(error)) from None
    click.echo(f"{name}: {method} stored in {path}")
    if method in credentials.GATEWAY_METHODS:
        base = context.config.agents.of(name).api_base or PROVIDERS[name].default_api_base
        note(f"the credential gateway sends it to {base} (agents.{name}.api_base)")
    else:
        note(
            f"{agent.title} reaches its vendor through the proxy with your login; a domain"
            " not allowed yet (a login refresh) is held for your approval"
        )
