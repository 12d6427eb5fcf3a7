"""Running git on the host for the agent: the environment it gets.

Everything the agent writes in the project is hostile input, the ``.git`` directory
included (except the few files the cloister mounts read-only). When the host executor
runs ``git`` for the agent (``hostexec``), git must not run code, or read or write
outside the project, because of what the agent planted there or passed as arguments.
Two defences:

- :func:`git_environment` runs git with :data:`HARDENED_GIT_CONFIG` in
  ``GIT_CONFIG_PARAMETERS``: command scope, so it beats every config file (the agent's
  nested repositories' included), and git hands it on to the child gits it starts in
  submodules. It also drops the variables that point git at other repositories or
  inject configuration.
- :func:`cloister_core.gitargv.check_git_argv` refuses argv that would override those
  settings or that runs or writes arbitrary things.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

__all__ = [
    "FILTER_QUERY",
    "HARDENED_GIT_CONFIG",
    "filters_off",
    "git_environment",
    "hardened_git_config",
]


# --- configuration -----------------------------------------------------------------

_HOOKS_PATH = "core.hooksPath"

# (key, value, why), in the order git receives them.
_HARDENED: tuple[tuple[str, str, str], ...] = (
    ("core.fsmonitor", "false", "the fsmonitor hook is a command git runs on every status"),
    (_HOOKS_PATH, "/dev/null", "a hooks directory that cannot exist disables every hook"),
    ("submodule.recurse", "false", "commands must not descend into the agent's nested repos"),
    ("diff.ignoreSubmodules", "all", "status/diff need not run git inside submodules"),
    ("status.submoduleSummary", "false", "the summary runs git log inside submodules"),
    ("fetch.recurseSubmodules", "false", "fetch must not fetch submodules (.gitmodules URLs)"),
    ("push.recurseSubmodules", "no", "push must not push (or check) submodules"),
    ("diff.submodule", "short", "the log/diff forms run git inside submodules"),
    # Transports: the network ones only. A local path or file:// URL runs git-upload-pack
    # or git-receive-pack *in that repository*, whose hooks and config the agent wrote
    # (`git push ./evil.git`); ext:: runs a shell command; other remote helpers are
    # programs named by the URL.
    ("protocol.allow", "never", "no transport unless listed below"),
    ("protocol.https.allow", "always", "the network transports a remote uses"),
    ("protocol.http.allow", "always", "the network transports a remote uses"),
    ("protocol.ssh.allow", "always", "the network transports a remote uses"),
    ("protocol.git.allow", "always", "the network transports a remote uses"),
    ("protocol.ext.allow", "never", "ext:: URLs (.gitmodules, remotes) run shell commands"),
    ("core.pager", "cat", "no pager program; output goes back to the agent as it is"),
)

HARDENED_GIT_CONFIG: tuple[tuple[str, str], ...] = tuple(
    (key, value) for key, value, _ in _HARDENED
)
"""Every hardened setting, hooks disabled included (``hardened_git_config(hooks=False)``)."""


def hardened_git_config(*, hooks: bool) -> tuple[tuple[str, str], ...]:
    """The settings host git runs with; *hooks* keeps the project's (human's) hooks."""
    if hooks:
        return tuple(pair for pair in HARDENED_GIT_CONFIG if pair[0] != _HOOKS_PATH)
    return HARDENED_GIT_CONFIG


# Variables that point git at other repositories, object stores or files, or that
# inject configuration, helper programs or protocol policy. Git's own list of
# repository-local variables (`git rev-parse --local-env-vars`, 2.39) plus the rest of
# `git help git`'s ENVIRONMENT that does the same. GIT_CONFIG_GLOBAL/SYSTEM/NOSYSTEM,
# GIT_SSH*, GIT_ASKPASS, SSH_AUTH_SOCK, editors and GIT_TRACE* stay: they are the
# human's own configuration and credential plumbing, and command scope beats config
# files anyway.
_REMOVED_VARIABLES = frozenset(
    {
        # git rev-parse --local-env-vars
        "GIT_ALTERNATE_OBJECT_DIRECTORIES",
        "GIT_COMMON_DIR",
        "GIT_CONFIG",
        "GIT_CONFIG_COUNT",
        "GIT_CONFIG_PARAMETERS",
        "GIT_DIR",
        "GIT_GRAFT_FILE",
        "GIT_IMPLICIT_WORK_TREE",
        "GIT_INDEX_FILE",
        "GIT_INTERNAL_SUPER_PREFIX",
        "GIT_NO_REPLACE_OBJECTS",
        "GIT_OBJECT_DIRECTORY",
        "GIT_PREFIX",
        "GIT_REPLACE_REF_BASE",
        "GIT_SHALLOW_FILE",
        "GIT_WORK_TREE",
        # other repositories, directories and files
        "GIT_CEILING_DIRECTORIES",
        "GIT_DISCOVERY_ACROSS_FILESYSTEM",
        "GIT_NAMESPACE",
        "GIT_QUARANTINE_PATH",
        "GIT_REDIRECT_STDERR",
        "GIT_REDIRECT_STDIN",
        "GIT_REDIRECT_STDOUT",
        "GIT_TEMPLATE_DIR",
        # programs git runs
        "GIT_EXEC_PATH",
        "GIT_EXTERNAL_DIFF",
        # overrides protocol.<name>.allow, ext:: included
        "GIT_ALLOW_PROTOCOL",
    }
)
_REMOVED_PREFIXES = ("GIT_CONFIG_KEY_", "GIT_CONFIG_VALUE_")


def _sq_quote(text: str) -> str:
    """Git's ``sq_quote``: single quotes, with ``'`` and ``!`` escaped outside them."""
    return "'" + text.replace("'", "'\\''").replace("!", "'\\!'") + "'"


def _config_parameters(pairs: Sequence[tuple[str, str]]) -> str:
    """``GIT_CONFIG_PARAMETERS`` for *pairs*, in the ``'key=value'`` form every git parses."""
    return " ".join(_sq_quote(f"{key}={value}") for key, value in pairs)


def git_environment(base: Mapping[str, str], *, hooks: bool) -> dict[str, str]:
    """A copy of *base* for running git on the project: hardened, nothing redirected."""
    environment = {
        name: value
        for name, value in base.items()
        if name not in _REMOVED_VARIABLES and not name.startswith(_REMOVED_PREFIXES)
    }
    environment["GIT_CONFIG_PARAMETERS"] = _config_parameters(hardened_git_config(hooks=hooks))
    environment["GIT_TERMINAL_PROMPT"] = "0"  # no credential prompt on a terminal nobody reads
    environment["GIT_PAGER"] = "cat"  # beats core.pager and pager.<cmd>
    return environment


# -- filter drivers ------------------------------------------------------------------------

_DRIVER_KEYS = (".clean", ".smudge", ".process")
# `git config` arguments that list the filter drivers' keys (for :func:`filters_off`).
FILTER_QUERY = ("config", "--name-only", "--get-regexp", r"^filter\..*\.(clean|smudge|process)$")


def filters_off(listed: str) -> dict[str, str]:
    """Variables that switch off every filter driver *listed* (:data:`FILTER_QUERY`'s
    output) names: the human's drivers are programs the agent's ``.gitattributes``
    would choose the files of (and git-lfs's smudge fetches from the URL of the agent's
    ``.lfsconfig``). Git has no wildcard for them, so each is named."""
    drivers = sorted(
        {
            key.removeprefix("filter.").rsplit(".", 1)[0]
            for key in listed.splitlines()
            if key.startswith("filter.") and key.endswith(_DRIVER_KEYS)
        }
    )
    off = (("clean", ""), ("smudge", ""), ("process", ""), ("required", "false"))
    pairs = [(f"filter.{driver}.{name}", value) for driver in drivers for name, value in off]
    # GIT_CONFIG_COUNT takes any key as it is (a driver's name may hold "=" or quotes).
    env = {"GIT_CONFIG_COUNT": str(len(pairs))}
    for number, (key, value) in enumerate(pairs):
        env[f"GIT_CONFIG_KEY_{number}"] = key
        env[f"GIT_CONFIG_VALUE_{number}"] = value
    return env
