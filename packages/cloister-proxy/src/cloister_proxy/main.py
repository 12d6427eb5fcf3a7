"""Console entry point of cloister-proxy (skeleton until issue 3)."""

from __future__ import annotations

import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    """Say plainly that the service is not built yet, and fail."""
    del argv
    print("cloister-proxy: not implemented yet (issue 3)", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
