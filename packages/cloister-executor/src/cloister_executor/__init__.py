"""cloister-executor: the hostexec path, from the cloister's request to the host's answer.

Two programs in one package: the **gateway** (``gateway.py``), a service of the
guardian stack that cloisters call with their token, which applies the command
patterns and asks the approval hub; and the **executor** (``daemon.py``), a host daemon
reachable only through a Unix socket mounted into the gateway, which runs an approved
argv (no shell) in the cloister's own directory (``runner.py``, ``environment.py``).
They speak the JSON-lines protocol of ``protocol.py``.
"""

from __future__ import annotations

__version__ = "0.1.0"
