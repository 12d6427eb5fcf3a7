"""A cloister's session on the host: prepared at start, reviewed and synced at stop;
its snapshots, and what gone cloisters left (gc)."""

# The modules the commands use (imported when first used: this package stays cheap).
__all__ = [
    "ending",
    "gc",
    "review",
    "sessions",
    "snapshots",
]
