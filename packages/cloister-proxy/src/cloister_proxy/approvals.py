"""Asking the approval hub about a domain no rule mentions.

The hub's service API (:mod:`cloister_core.hub`) is a long poll: one POST that
returns when a human decides. Concurrent requests of one cloister for one host share
a single pending item (single flight): the first asks, the others wait on the same
answer. The asking task belongs to the server's task group, not to the first
client, so a client that gives up does not cancel the question for the others.
"""

from __future__ import annotations

import asyncio
from typing import Protocol

import httpx

from cloister_core.hub import (
    SERVICE_AUTH_SCHEME,
    SERVICE_DOMAINS_PATH,
    DomainDecision,
    DomainRequest,
)


class HubUnavailableError(Exception):
    """The hub could not be asked, or answered something unusable."""


class ApprovalHub(Protocol):
    async def request_domain(
        self, request: DomainRequest, wait_seconds: float
    ) -> DomainDecision: ...


class HttpApprovalHub:
    """The hub at *base_url*, authenticated with the stack's service credential."""

    def __init__(self, base_url: str, credential: str | None, client: httpx.AsyncClient) -> None:
        self._url = base_url.rstrip("/") + SERVICE_DOMAINS_PATH
        self._headers = (
            {"Authorization": f"{SERVICE_AUTH_SCHEME} {credential}"} if credential else {}
        )
        self._client = client

    async def request_domain(self, request: DomainRequest, wait_seconds: float) -> DomainDecision:
        try:
            response = await self._client.post(
                self._url,
                json=request.model_dump(mode="json"),
                headers=self._headers,
                # The hub holds the request until a human decides; give it a little
                # more than the approval timeout so its own timeout answer arrives.
                timeout=httpx.Timeout(wait_seconds + 5.0, connect=5.0),
            )
        except httpx.HTTPError as error:
            raise HubUnavailableError(f"{type(error).__name__}: {error}") from None
        if response.status_code != 200:
            raise HubUnavailableError(
                f"hub answered {response.status_code}: {response.text[:200]!r}"
            )
        try:
            return DomainDecision.model_validate_json(response.content)
        except ValueError as error:
            raise HubUnavailableError(f"hub answered an invalid decision: {error}") from None


class PendingApprovals:
    """Single-flight wrapper: one hub request per (cloister, host) at a time."""

    def __init__(self, hub: ApprovalHub, tasks: asyncio.TaskGroup) -> None:
        self._hub = hub
        self._tasks = tasks
        self._pending: dict[
            tuple[str, str], asyncio.Task[DomainDecision | HubUnavailableError | None]
        ] = {}

    @property
    def pending(self) -> int:
        return len(self._pending)

    async def _ask(
        self, key: tuple[str, str], request: DomainRequest, wait_seconds: float
    ) -> DomainDecision | HubUnavailableError | None:
        # Runs in the server's task group: it must return, never raise, or it would
        # take the whole server down with it.
        try:
            async with asyncio.timeout(wait_seconds):
                return await self._hub.request_domain(request, wait_seconds)
        except TimeoutError:
            return None
        except HubUnavailableError as error:
            return error
        except Exception as error:  # reported to the waiting clients, never raised here
            return HubUnavailableError(f"{type(error).__name__}: {error}")
        finally:
            self._pending.pop(key, None)

    async def decide(self, request: DomainRequest, wait_seconds: float) -> DomainDecision | None:
        """The decision for *request*; None when nobody decided within *wait_seconds*.

        Raises :class:`HubUnavailableError` if the hub could not be asked.
        """
        key = (request.cloister, request.host)
        task = self._pending.get(key)
        if task is None:
            task = self._tasks.create_task(self._ask(key, request, wait_seconds))
            self._pending[key] = task
        # shield: a waiter that is cancelled must not cancel the shared question.
        outcome = await asyncio.shield(task)
        if isinstance(outcome, HubUnavailableError):
            raise outcome
        return outcome
