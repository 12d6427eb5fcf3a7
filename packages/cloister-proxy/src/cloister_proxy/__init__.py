"""cloister-proxy: the authenticated allowlist egress proxy on each cloister's network.

Skeleton: the package, its console script and its place in the workspace exist so
that the stack, the lock file and CI are whole; the service itself is built in
issue 3. It will share code with the other services only through cloister-core.
"""

from __future__ import annotations

__version__ = "0.1.0"
