"""cloister-approval: the approval hub: pending domain and command requests, web UI and JSON API.

It shares code with the other services only through cloister-core.
"""

from __future__ import annotations

__version__ = "0.1.0"
