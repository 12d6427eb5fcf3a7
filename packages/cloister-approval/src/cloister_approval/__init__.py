"""cloister-approval: the approval hub: pending domain and command requests, web UI and JSON API.

Skeleton: the package, its console script and its place in the workspace exist so
that the stack, the lock file and CI are whole; the service itself is built in
issue 4. It will share code with the other services only through cloister-core.
"""

from __future__ import annotations

__version__ = "0.1.0"
