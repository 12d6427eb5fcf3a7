"""Dev container Features on the host: fetched, cached, locked, and installed as layers.

:mod:`.oci` (the registry client, the only module touching the network), :mod:`.cache`
(``<data>/cache/features/``), :mod:`.resolve` (ids to Features ready to install, the
``dependsOn`` closure, the order, the lock file, the metadata's requests) and
:mod:`.layers` (the build installing them). What a Feature *is* (its metadata, options,
order, requests, the lock's format) is :mod:`cloister_core.devcontainer.featureset`'s.
"""

__all__ = ["resolve"]  # what the commands use (imported when first used)
