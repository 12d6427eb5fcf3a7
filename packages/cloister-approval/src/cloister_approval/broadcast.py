"""Fan-out of hub events to every open event stream (the UI's live updates).

Each subscriber has a bounded queue. A subscriber that does not keep up (a frozen
browser tab) is dropped rather than allowed to grow the hub's memory; its page
reconnects and re-reads the state.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

QUEUE_LIMIT = 1000


@dataclass(frozen=True, slots=True)
class Event:
    name: str
    data: dict[str, Any]


CLOSED = Event("closed", {})


class Broadcaster:
    def __init__(self) -> None:
        self._subscribers: set[asyncio.Queue[Event]] = set()

    @property
    def subscribers(self) -> int:
        return len(self._subscribers)

    def publish(self, event: Event) -> None:
        for queue in list(self._subscribers):
            try:
                queue.put_nowait(event)
            except asyncio.QueueFull:
                self._subscribers.discard(queue)
                queue.get_nowait()  # make room for the notice that it was dropped
                queue.put_nowait(CLOSED)

    @contextlib.contextmanager
    def subscribe(self) -> Iterator[asyncio.Queue[Event]]:
        queue: asyncio.Queue[Event] = asyncio.Queue(maxsize=QUEUE_LIMIT)
        self._subscribers.add(queue)
        try:
            yield queue
        finally:
            self._subscribers.discard(queue)
