"""``cloister config``: where the files are, whether they are valid, what they say."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from cloister_core.errors import CloisterError, ConfigError, ConfigProblem
from cloister_core.names import validate_name

if TYPE_CHECKING:
    from cloister_cli.context import Context as CliContext
    from cloister_core.config.check import CheckReport

# The config models (pydantic, ruamel.yaml) are imported by the commands that read the
# config: `config path` prints paths only, at once.


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
        "logs_dir": str(paths.logs_dir),
    }
    if as_json:
        click.echo(json.dumps(listing, indent=2))
        return
    for key, value in listing.items():
        click.echo(f"{key:<14} {value}")


def _ref_errors(obj: CliContext, report: CheckReport) -> list[ConfigError]:
    """The project's refs that a cloister could not mount, at their lines."""
    project_file = report.file("project")
    if report.project_config is None or project_file is None or not report.project_config.refs:
        return []
    # cloisters imports the docker SDK: only a project with refs needs it.
    from cloister_cli.container import cloisters  # noqa: PLC0415
    from cloister_cli.repo import refs  # noqa: PLC0415

    root = report.project_config.root
    problems = refs.ref_problems(
        Path(root).expanduser() if root else None,
        report.project_config.refs,
        cloisters.Forbidden.for_host(obj.paths, obj.home),
    )
    if not problems:
        return []
    return [
        ConfigError(
            project_file.path,
            [
                ConfigProblem(message, *project_file.position(("refs", index)))
                for index, message in problems
            ],
        )
    ]


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"


@config.command("check")
@click.option("-p", "--project", help="Also check this project's files and refs.")
@click.option("--strict", is_flag=True, help="Treat warnings as errors (exit status 1).")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON object for scripts.")
@click.pass_obj
def config_check(obj: CliContext, project: str | None, strict: bool, as_json: bool) -> None:
    """Validate config.yaml (written with defaults if missing), and a project's files.

    Errors and warnings name the file, line and column. Warnings are rules that are
    valid but open too much (a pattern on a public suffix such as *.com, an
    auto_approve pattern that approves any command, no rule for the AI providers'
    APIs), and keys of the Go implementation's config.yaml that Cloister sets aside
    or reads as its own (each with what Cloister does instead). Its approvals/
    directory is moved to decisions/. Exit status 1 if anything is wrong, or with
    --strict if anything warns.

    \b
    Examples:
      cloister config check
      cloister config check -p my-api --strict
    """
    from cloister_cli.repo import projects  # noqa: PLC0415 - see the imports above
    from cloister_core.config import ensure_default_config  # noqa: PLC0415
    from cloister_core.config.check import check_configuration  # noqa: PLC0415

    project = _project_option(project)
    if project is not None:
        projects.require(obj.paths, project)
    if ensure_default_config(obj.paths.config_file) and not as_json:
        click.echo(f"wrote the default configuration to {obj.paths.config_file}")
    from cloister_core.decisions import migrate_approvals  # noqa: PLC0415 - where it runs

    for line in migrate_approvals(obj.paths).lines():
        click.echo(line, err=as_json)
    report = check_configuration(obj.paths, project)
    errors = [*report.errors, *_ref_errors(obj, report)]
    problems = sum(len(error.problems) for error in errors)
    failed = bool(errors) or (strict and bool(report.warnings))
    if as_json:
        document = {
            "valid": not failed,
            "strict": strict,
            "project": project,
            "files": [
                {"file": str(file.path), "scope": file.scope, "state": file.state}
                for file in report.files
            ],
            "domain_rules": report.domain_rules,
            "errors": [
                {
                    "file": str(error.path),
                    "line": problem.line,
                    "column": problem.column,
                    "message": problem.message,
                }
                for error in errors
                for problem in error.problems
            ],
            "warnings": [warning.to_json() for warning in report.warnings],
        }
        click.echo(json.dumps(document, indent=2))
        if failed:
            raise SystemExit(1)
        return
    for file in report.files:
        state = {"absent": "absent (defaults)"}.get(file.state, file.state)
        click.echo(f"{state:<18} {file.path}")
    for error in errors:
        click.echo(str(error), err=True)
    for warning in report.warnings:
        click.echo(warning.render(), err=True)
    warned = _count(len(report.warnings), "warning")
    if errors:
        also = f", {warned}" if report.warnings else ""
        raise click.ClickException(
            f"the configuration is not valid: {_count(problems, 'error')}{also}"
        )
    if failed:
        raise click.ClickException(f"{warned}, which --strict makes errors")
    summary = f"{report.domain_rules} domain rules, configuration is valid"
    if report.warnings:
        summary += f" ({warned}; --strict makes them errors)"
    click.echo(summary)


@config.command("show")
@click.option("-p", "--project", help="Merge this project's files too.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON object for scripts.")
@click.pass_obj
def config_show(obj: CliContext, project: str | None, as_json: bool) -> None:
    """Show the effective domain rules, hostexec patterns and agents' background hosts.

    Hostexec patterns are regular expressions matched against the whole command.

    \b
    Examples:
      cloister config show
      cloister config show -p my-api --json | jq '.domains[] | select(.action=="deny")'
    """
    from cloister_cli.repo import projects  # noqa: PLC0415 - see the imports above
    from cloister_core.background import (  # noqa: PLC0415
        BACKGROUND_HOSTS,
        background_hosts,
        overridden,
    )
    from cloister_core.policy import load_project_policy  # noqa: PLC0415

    project = _project_option(project)
    if project is not None:
        projects.require(obj.paths, project)
    from cloister_core.decisions import migrate_approvals  # noqa: PLC0415 - where it runs

    for line in migrate_approvals(obj.paths).lines():
        click.echo(line, err=True)
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
    commands = {
        "auto_approve": [
            {"pattern": rule.pattern.pattern, "file": str(rule.source)}
            for rule in policy.commands.auto_approve
        ],
        "manual_approve": [
            {"pattern": rule.pattern.pattern, "file": str(rule.source)}
            for rule in policy.commands.manual_approve
        ],
    }
    timeout = policy.config.hostexec.timeout.total_seconds()
    agents = policy.config.agents
    background = {
        name: {
            "hosts": list(background_hosts(name, agents)),
            "source": "config" if overridden(name, agents) else "default",
        }
        for name in BACKGROUND_HOSTS
    }
    if as_json:
        document = {
            "project": project,
            "domains": domains,
            "allowed_ports": sorted(proxy.allowed_ports),
            "unlisted_domain_behavior": proxy.unlisted_domain_behavior,
            "approval_timeout_seconds": proxy.approval_timeout.total_seconds(),
            "hostexec": {**commands, "timeout_seconds": timeout},
            "agent_background_hosts": background,
        }
        click.echo(json.dumps(document, indent=2))
        return
    from rich.table import Table  # noqa: PLC0415 - rich only when a table is drawn
    from rich.text import Text  # noqa: PLC0415

    from cloister_cli.commands.output import console as whole_console  # noqa: PLC0415

    table = Table("action", "rule", "ports", "scope", "file", title="Domain rules (deny wins)")
    for row in domains:
        ports = ", ".join(map(str, row["ports"])) if row["ports"] else "default"
        table.add_row(row["action"], row["rule"], ports, row["scope"], Text(row["file"]))
    console = whole_console()
    console.print(table)
    console.print(
        f"allowed ports {sorted(proxy.allowed_ports)}; unlisted domains: "
        f"{proxy.unlisted_domain_behavior} (timeout {proxy.approval_timeout.total_seconds():g}s)"
    )
    hosts = Table(
        "agent", "hosts", "from", title="Agents' background hosts (refused unless a rule decides)"
    )
    for name, row in background.items():
        source = f"agents.{name}.background_hosts" if row["source"] == "config" else "default"
        hosts.add_row(name, Text(", ".join(row["hosts"]) or "(none)"), source)
    console.print(hosts)
    patterns = Table(
        "list", "pattern", "file", title="Hostexec patterns (auto_approve is tried first)"
    )
    for action, rows in commands.items():
        for row in rows:
            # Text, not markup: a regular expression's "[a-z]" is not a style.
            patterns.add_row(action, Text(row["pattern"]), Text(row["file"]))
    if patterns.row_count:
        console.print(patterns)
    console.print(
        "hostexec: auto_approve runs at once, manual_approve waits for you in the approval"
        f" UI, any other command is refused; a command is killed after {timeout:g}s"
    )
