"""cloister-cli: the ``cloister`` command.

A thin click shell over cloister-core and, later, the lifecycle library: each command
parses its options, calls one library function and renders the result (text for
people, ``--json`` for scripts). Every command's help ends with an example; a test
enforces it.
"""

from __future__ import annotations

__version__ = "0.1.0"
