"""``cloister-approval``: options → settings → ``create_app`` → uvicorn.

    cloister-approval [--port 9999] [--config-dir DIR] [--hub-secret-file FILE] ...

Every option also comes from a ``CLOISTER_APPROVAL_<NAME>`` variable; secrets only
from files or variables, never from the command line (``ps`` shows it to everyone).
The options are made from the settings' fields (their descriptions are the help);
pydantic validates the values, once, and a bad one is a one-line error (status 2).

The hub always needs its secret. The stack mounts ``<data>/guardian/hub.secret`` and
names it in ``CLOISTER_APPROVAL_HUB_SECRET_FILE``; run by hand without one, the hub
makes a secret for this run only and prints a one-time login URL.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from datetime import timedelta
from typing import Any, NoReturn

from pydantic import SecretStr, ValidationError
from pydantic_settings import SettingsError

from cloister_approval.settings import ApprovalSettings
from cloister_core.hubauth import generate_secret, login_url

PROG = "cloister-approval"
ENV_PREFIX = "CLOISTER_APPROVAL_"
LOGIN_SECONDS = 600  # a person starting the hub by hand needs a moment to open the URL
SECRET_FIELDS = frozenset({"hub_secret", "service_credential"})
METAVARS = {
    "config_dir": "DIR",
    "data_dir": "DIR",
    "host": "ADDRESS",
    "port": "PORT",
    "hub_secret_file": "FILE",
    "hub_sessions_dir": "DIR",
    "service_credential_file": "FILE",
    "audit_log": "FILE",
    "cloister_logs": "DIR",
    "max_pending": "N",
    "recent_decisions": "N",
}
EPILOG = f"""\
Each option can also be set as {ENV_PREFIX}<NAME> (e.g. {ENV_PREFIX}PORT=8999;
a list as JSON). The secrets only that way or in a file: {ENV_PREFIX}HUB_SECRET,
{ENV_PREFIX}SERVICE_CREDENTIAL. Durations: 90s, 5m, 1h30m, 720h.

Without --hub-secret-file the hub makes a secret for this run and prints a
one-time login URL (valid {LOGIN_SECONDS // 60} minutes); restart it for a new one.

Examples:
  cloister-approval
  cloister-approval --port 8999 --config-dir ~/.config/cloister
  cloister-approval --hub-secret-file ~/.local/share/cloister/guardian/hub.secret
"""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        # One line, like the value errors; --help has the usage.
        self.exit(2, f"{self.prog}: error: {message}\n")


def _default_text(default: Any) -> str:
    if isinstance(default, timedelta):
        seconds = default.total_seconds()
        for unit, size in (("h", 3600), ("m", 60)):
            if seconds >= size and seconds % size == 0:
                return f"{seconds / size:g}{unit}"
        return f"{seconds:g}s"
    if isinstance(default, tuple):
        return " ".join(default) or "none"
    return str(default)


def build_parser() -> argparse.ArgumentParser:
    """Options made from the settings' fields; only the values given are passed on."""
    parser = _Parser(
        prog=PROG,
        description="The approval hub: the web UI and API where held domains and host"
        " commands wait for a human.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        argument_default=argparse.SUPPRESS,
    )
    for name, field in ApprovalSettings.model_fields.items():
        if name in SECRET_FIELDS:
            continue
        option = "--" + name.replace("_", "-")
        help_text = field.description or ""
        if field.default_factory is None and field.default not in (None, (), False):
            help_text += f" (default: {_default_text(field.default)})"
        if field.annotation is bool:
            parser.add_argument(option, action=argparse.BooleanOptionalAction, help=help_text)
        elif name == "public_hosts":
            help_text += "; repeat for more"
            parser.add_argument(
                "--public-host", dest=name, action="append", metavar="HOST:PORT", help=help_text
            )
        else:
            duration = field.annotation is timedelta
            metavar = METAVARS.get(name, "DURATION" if duration else name.upper())
            parser.add_argument(option, dest=name, metavar=metavar, help=help_text)
    return parser


def _option(name: str) -> str:
    flag = "--public-host" if name == "public_hosts" else "--" + name.replace("_", "-")
    return f"{flag} ({ENV_PREFIX}{name.upper()})"


def _validation_message(error: ValidationError) -> str:
    problems = []
    for item in error.errors(include_url=False):
        where = ".".join(str(part) for part in item["loc"])
        name = str(item["loc"][0]) if item["loc"] else ""
        subject = _option(name) if name in ApprovalSettings.model_fields else where
        message = item["msg"].removeprefix("Value error, ")
        given = repr(item.get("input"))
        problems.append(f"{subject}: {message}" + ("" if given in message else f" (got {given})"))
    return "; ".join(problems)


def load_settings(argv: Sequence[str]) -> ApprovalSettings:
    """Settings from *argv* and the environment; exits 2 with one line if they are bad."""
    parser = build_parser()
    values = vars(parser.parse_args(list(argv)))
    try:
        settings = ApprovalSettings(**values)
        # Read now, so an unreadable file is this one line, not a traceback later.
        secret, credential = settings.secret(), settings.credential()
    except ValidationError as error:
        parser.exit(2, f"{PROG}: error: {_validation_message(error)}\n")
    except (SettingsError, OSError, UnicodeDecodeError) as error:
        parser.exit(2, f"{PROG}: error: {error}\n")
    for value, name in ((secret, "hub_secret"), (credential, "service_credential")):
        if value == "":
            parser.exit(2, f"{PROG}: error: {_option(name + '_file')}: the file is empty\n")
    return settings


def main(argv: Sequence[str] | None = None) -> int:
    import uvicorn  # noqa: PLC0415 - not needed for --help or a bad option

    from cloister_approval.app import create_app  # noqa: PLC0415 - likewise

    settings = load_settings(sys.argv[1:] if argv is None else argv)
    announce = f"{PROG}: {settings.url}"
    made = None if settings.secret() is not None else generate_secret()
    if made is not None:
        settings = settings.model_copy(update={"hub_secret": SecretStr(made)})
    app = create_app(settings)
    if made is not None:
        # Minted once the hub exists: it refuses tickets from before it started.
        link = login_url(settings.url, made, now=time.time(), lifetime=LOGIN_SECONDS)
        announce += f"\n{PROG}: log in (once, within {LOGIN_SECONDS // 60} minutes): {link}"
    print(announce, file=sys.stderr, flush=True)
    uvicorn.run(
        app,
        host=settings.host,
        port=settings.port,
        log_level="warning",
        # Long polls and event streams stay open; let shutdown end them promptly.
        timeout_graceful_shutdown=2,
        proxy_headers=False,
        server_header=False,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
