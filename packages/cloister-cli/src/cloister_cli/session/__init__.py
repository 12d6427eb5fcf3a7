"""A cloister's session on the host: prepared at start, reviewed and synced at stop;
its snapshots, and what gone cloisters left (gc)."""
