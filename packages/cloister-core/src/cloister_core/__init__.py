"""cloister-core: the pure library every Cloister service and tool shares.

No Docker, no network, no module-level state. Import what you need from its submodule
(``from cloister_core.paths import CloisterPaths``): this package re-exports nothing, so
importing one submodule loads only what that one needs. The submodules, by concern
(docs/architecture.md shows where each is used):

Files and names
    ``paths`` (where files live: ``CloisterPaths``), ``names`` (project, cloister and
    branch names), ``fileio`` (crash-safe writes, a lock), ``beneath`` (files below a
    directory the agent can rearrange, never following a link), ``printable`` (agent
    text made safe to show), ``errors`` (the exceptions), ``stack`` (the guardian's
    names, ports, aliases and labels), ``lazyexports`` (a package's names imported
    when first used)
Configuration and policy
    ``config`` (models and loading of config, project and decision files), ``hosts``
    (host/IP/pattern normalisation), ``suffixes`` (public suffixes), ``rules`` (the
    domain policy and its verdicts), ``background`` (hosts agents call on their own),
    ``commands`` and ``patterns`` (hostexec patterns and verdicts), ``policy`` (one
    project's merged policy), ``decisions`` (the decision store), ``watch`` (reloading
    policies and tokens while a service runs)
Cloisters and the services
    ``tokens`` (a cloister's identity), ``hub`` (the approval hub's service API),
    ``hubauth`` (the hub's human credential), ``credentials`` (agent credentials the
    credential gateway swaps in), ``settings`` (what the services' settings share),
    ``audit`` (the JSON-lines audit log), ``sessions`` and ``snapshots`` (a session's
    record and the snapshot that undoes it), ``cloisterenv`` (the variables every
    cloister gets)
Git on the host
    ``gitrun`` (the one way host git runs), ``gitsafety`` (its environment), ``gitargv``
    (the argv the agent may give it), ``repository`` (the human's repository),
    ``owngit`` (a cloister's own git directory)
devcontainer.json
    ``devcontainer`` (discovery, parsing and Cloister's overrides), ``jsonc`` (JSON with
    comments)
"""
