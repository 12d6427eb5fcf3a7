"""The gateway's connection counts, sans I/O: connections opened, charged, closed."""

from __future__ import annotations

from cloister_proxy.credentials.limits import ConnectionBook, Ticket

A, B = "172.30.0.5", "172.30.1.5"


def book(unauthenticated: int = 3, per_cloister: int = 2) -> ConnectionBook:
    return ConnectionBook(unauthenticated_per_address=unauthenticated, per_cloister=per_cloister)


def admitted(connections: ConnectionBook, peer: str) -> Ticket:
    ticket = connections.admit(peer)
    assert isinstance(ticket, Ticket)
    return ticket


def test_a_cloister_is_capped_for_the_whole_life_of_its_connections() -> None:
    connections = book()
    first, second, third = (admitted(connections, A) for _ in range(3))
    assert connections.charge(first, "a")
    assert connections.charge(second, "a")
    # charged: no longer counted as waiting, but as the cloister's
    assert (connections.held("a"), connections.waiting(A)) == (2, 1)
    assert not connections.charge(third, "a")  # its third connection, at its first request
    assert connections.admit(A) == "cloister"  # and any further one, at once
    assert connections.charge(first, "a")  # a kept-alive request is counted once
    assert connections.held("a") == 2
    connections.release(first)
    assert connections.held("a") == 1
    assert connections.charge(third, "a")


def test_another_cloister_is_not_affected() -> None:
    connections = book()
    for _ in range(2):
        assert connections.charge(admitted(connections, A), "a")
    assert connections.admit(A) == "cloister"
    other = admitted(connections, B)
    assert connections.charge(other, "b")
    assert (connections.held("a"), connections.held("b")) == (2, 1)


def test_connections_before_a_request_are_capped_per_address() -> None:
    connections = book(unauthenticated=2)
    waiting = [admitted(connections, A) for _ in range(2)]
    assert connections.admit(A) == "address"
    assert isinstance(connections.admit(B), Ticket)
    connections.release(waiting[0])
    assert isinstance(connections.admit(A), Ticket)


def test_release_is_idempotent_and_a_closed_ticket_is_never_charged() -> None:
    connections = book()
    ticket = admitted(connections, A)
    assert connections.charge(ticket, "a")
    connections.release(ticket)
    connections.release(ticket)
    assert (connections.held("a"), connections.waiting(A)) == (0, 0)
    assert not connections.charge(ticket, "a")
    waiting = admitted(connections, A)
    connections.release(waiting)
    connections.release(waiting)
    assert connections.waiting(A) == 0
    assert not connections.charge(waiting, "a")
    assert connections.held("a") == 0
