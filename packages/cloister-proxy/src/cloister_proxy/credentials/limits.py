"""How many connections the credential gateway holds for whom, sans I/O.

Before a request on it was forwarded, a connection counts against its peer address
(``max_unauthenticated_per_address``); from then on, for the rest of its life (idle
keep-alive, a slow body, a long stream), against its cloister
(``max_connections_per_cloister``): each may hold an upstream connection on the one
shared key, so one cloister must not take them all. A cloister at its limit has its
further connections refused at accept, from its address, before they cost a head.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Full = Literal["address", "cloister"]


@dataclass(slots=True, eq=False)
class Ticket:
    """One open connection, and whom it is counted against."""

    peer: str
    cloister: str | None = None
    closed: bool = False


class ConnectionBook:
    def __init__(self, *, unauthenticated_per_address: int, per_cloister: int) -> None:
        self.unauthenticated_per_address = unauthenticated_per_address
        self.per_cloister = per_cloister
        self._unauthenticated: dict[str, int] = {}  # per peer address
        self._cloisters: dict[str, int] = {}  # per cloister
        self._charged_peers: dict[str, int] = {}  # the same connections, per peer address

    def admit(self, peer: str) -> Ticket | Full:
        """A new connection from *peer*: its ticket, or which limit it is over."""
        if self._charged_peers.get(peer, 0) >= self.per_cloister:
            return "cloister"
        waiting = self._unauthenticated.get(peer, 0)
        if waiting >= self.unauthenticated_per_address:
            return "address"
        self._unauthenticated[peer] = waiting + 1
        return Ticket(peer)

    def charge(self, ticket: Ticket, cloister: str) -> bool:
        """Count *ticket* against *cloister* from now on (once); False if it is full."""
        if ticket.cloister is not None or ticket.closed:
            return not ticket.closed
        count = self._cloisters.get(cloister, 0)
        if count >= self.per_cloister:
            return False
        self._cloisters[cloister] = count + 1
        _add(self._charged_peers, ticket.peer, 1)
        _add(self._unauthenticated, ticket.peer, -1)
        ticket.cloister = cloister
        return True

    def release(self, ticket: Ticket) -> None:
        """The connection closed (idempotent)."""
        if ticket.closed:
            return
        ticket.closed = True
        if ticket.cloister is None:
            _add(self._unauthenticated, ticket.peer, -1)
        else:
            _add(self._cloisters, ticket.cloister, -1)
            _add(self._charged_peers, ticket.peer, -1)

    def held(self, cloister: str) -> int:
        return self._cloisters.get(cloister, 0)

    def waiting(self, peer: str) -> int:
        return self._unauthenticated.get(peer, 0)


def _add(counts: dict[str, int], key: str, delta: int) -> None:
    value = counts.get(key, 0) + delta
    if value > 0:
        counts[key] = value
    else:
        counts.pop(key, None)
