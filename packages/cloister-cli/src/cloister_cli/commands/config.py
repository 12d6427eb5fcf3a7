"""``cloister config``: where the files are, whether they are valid, what they say."""

from __future__ import annotations

import json
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from cloister_cli.lifecycle import Context as CliContext
from cloister_core import CloisterError, ConfigError, load_project_policy
from cloister_core.config import ensure_default_config
from cloister_core.names import validate_name


def _project_option(value: str | None) -> str | None:
    if value is None:
        return None
    try:
        return validate_name(value, what="project name")
    except CloisterError as error:
        raise click.BadParameter(str(error)) from None


@click.group()
def config() -> None:
    """Inspect and validate Cloister's configuration.

    \b
    Examples:
      cloister config path
      cloister config check -p my-api
    """


@config.command("path")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON object for scripts.")
@click.pass_obj
def config_path(obj: CliContext, as_json: bool) -> None:
    """Print where Cloister keeps its files.

    \b
    Examples:
      cloister config path
      $EDITOR "$(cloister config path --json | jq -r .config_file)"
    """
    paths = obj.paths
    listing = {
        "config_dir": str(paths.config_dir),
        "config_file": str(paths.config_file),
        "projects_dir": str(paths.projects_dir),
        "decisions_dir": str(paths.decisions_dir),
        "tokens_dir": str(paths.tokens_dir),
        "data_dir": str(paths.data_dir),
        "audit_log": str(paths.audit_log),
    }
    if as_json:
        click.echo(json.dumps(listing, indent=2))
        return
    for key, value in listing.items():
        click.echo(f"{key:<14} {value}")


@config.command("check")
@click.option("-p", "--project", help="Also check this project's files.")
@click.pass_obj
def config_check(obj: CliContext, project: str | None) -> None:
    """Validate config.yaml (written with defaults if missing), and a project's files.

    Errors name the file, line and column. Exit status 1 if anything is wrong.

    \b
    Examples:
      cloister config check
      cloister config check -p my-api
    """
    project = _project_option(project)
    if ensure_default_config(obj.paths.config_file):
        click.echo(f"wrote the default configuration to {obj.paths.config_file}")
    try:
        policy = load_project_policy(obj.paths, project)
    except ConfigError as error:
        raise click.ClickException(str(error)) from None
    for path in policy.files:
        state = "ok" if path.exists() else "absent (defaults)"
        click.echo(f"{state:<18} {path}")
    click.echo(f"{len(policy.domains)} domain rules, configuration is valid")


@config.command("show")
@click.option("-p", "--project", help="Merge this project's files too.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON object for scripts.")
@click.pass_obj
def config_show(obj: CliContext, project: str | None, as_json: bool) -> None:
    """Show the effective domain rules and hostexec patterns, with their files.

    \b
    Examples:
      cloister config show
      cloister config show -p my-api --json | jq '.domains[] | select(.action=="deny")'
    """
    project = _project_option(project)
    try:
        policy = load_project_policy(obj.paths, project, create_config=True)
    except ConfigError as error:
        raise click.ClickException(str(error)) from None
    domains: list[dict[str, Any]] = [
        {
            "action": rule.action,
            "rule": rule.text,
            "ports": sorted(rule.ports) if rule.ports is not None else None,
            "scope": rule.source.scope,
            "file": str(rule.source.file),
        }
        for rule in policy.domains.rules()
    ]
    proxy = policy.config.proxy
    if as_json:
        document = {
            "project": project,
            "domains": domains,
            "allowed_ports": sorted(proxy.allowed_ports),
            "unlisted_domain_behavior": proxy.unlisted_domain_behavior,
            "approval_timeout_seconds": proxy.approval_timeout.total_seconds(),
            "hostexec": {
                "auto_approve": [
                    {"pattern": rule.pattern.pattern, "file": str(rule.source)}
                    for rule in policy.commands.auto_approve
                ],
                "manual_approve": [
                    {"pattern": rule.pattern.pattern, "file": str(rule.source)}
                    for rule in policy.commands.manual_approve
                ],
                "timeout_seconds": policy.config.hostexec.timeout.total_seconds(),
            },
        }
        click.echo(json.dumps(document, indent=2))
        return
    table = Table("action", "rule", "ports", "scope", "file", title="Domain rules (deny wins)")
    for row in domains:
        ports = ", ".join(map(str, row["ports"])) if row["ports"] else "default"
        table.add_row(row["action"], row["rule"], ports, row["scope"], row["file"])
    console = Console()
    console.print(table)
    console.print(
        f"allowed ports {sorted(proxy.allowed_ports)}; unlisted domains: "
        f"{proxy.unlisted_domain_behavior} (timeout {proxy.approval_timeout.total_seconds():g}s)"
    )
