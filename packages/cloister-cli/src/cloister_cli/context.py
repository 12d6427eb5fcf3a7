"""The shared context of a command: paths, and config and clients made when first used.

Every command that takes it makes one before it runs, so this module imports nothing
heavy: the config models, the docker SDK, the guardian and the hub client are imported
by the property that makes them (``cloister config check`` never loads the docker SDK,
``cloister setup --list`` neither).
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from cloister_cli.container import engine
from cloister_cli.images.sourcetree import SourceTreeError, source_tree
from cloister_core import stack
from cloister_core.paths import CloisterPaths

if TYPE_CHECKING:
    from cloister_cli.stack.guardian import Guardian
    from cloister_cli.stack.hub_client import HubClient
    from cloister_core.config.models import GlobalConfig
    from cloister_executor.gitsync import Syncer


@dataclass
class Context:
    """Paths, config and clients, made once per command and only when needed."""

    paths: CloisterPaths
    home: Path = field(default_factory=Path.home)
    # False for what must write nothing (``start --dry-run``): no default config.yaml.
    writes_config: bool = True

    @functools.cached_property
    def config(self) -> GlobalConfig:
        from cloister_core.config import load_global_config  # noqa: PLC0415 - see the docstring

        return load_global_config(self.paths, create=self.writes_config)

    def for_dry_run(self) -> Context:
        """This context for a command that writes nothing (its config not written)."""
        return Context(self.paths, self.home, writes_config=False)

    @functools.cached_property
    def instance(self) -> stack.Instance:
        """This user's guardian on the engine, for this data directory."""
        return stack.Instance.of(self.paths, os.getuid())

    @functools.cached_property
    def docker(self) -> engine.Engine:
        return engine.connect()

    @functools.cached_property
    def source(self) -> Path | None:
        try:
            return source_tree()
        except SourceTreeError:
            return None

    @functools.cached_property
    def guardian(self) -> Guardian:
        from cloister_cli.stack.guardian import Guardian  # noqa: PLC0415 - see the module docstring

        return Guardian(self.paths, self.config, self.docker, self.source, self.instance)

    @functools.cached_property
    def hub(self) -> HubClient:
        """This machine's approval hub, with its secret."""
        return self.hub_at(None)

    def hub_at(self, base_url: str | None) -> HubClient:
        """The approval hub at *base_url* (None: this machine's), with this machine's secret."""
        from cloister_cli.stack.hub_client import HubClient  # noqa: PLC0415 - see the module docstring

        return HubClient.for_machine(self.paths, self.config.guardian.ui_port, base_url)

    def require_source(self) -> Path:
        return source_tree()

    @functools.cached_property
    def syncer(self) -> Syncer:
        """Brings cloisters' commits back (``cloister sync``, ``stop``)."""
        from cloister_executor.engine import Engine  # noqa: PLC0415 - see the module docstring
        from cloister_executor.gitsync import Syncer  # noqa: PLC0415

        return Syncer(
            self.paths,
            Engine(os.environ.get("DOCKER_HOST")),
            fast_forward=self.config.git.fast_forward,
        )
