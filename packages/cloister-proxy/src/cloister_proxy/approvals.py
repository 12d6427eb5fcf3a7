"""Asking the approval hub about a domain no rule mentions.

The hub's service API (:mod:`cloister_core.hub`) is a long poll: one POST that
returns when a human decides. Concurrent requests of one cloister for one host share
a single question (single flight): the first asks, the others wait on the same
answer. The asking task belongs to the server's task group, not to the first client,
so one client that gives up does not end the question for the others; when the *last*
of its clients has gone, the question is cancelled, which closes its HTTP request, and
the hub withdraws the item from the approval UI.

Fair shares: one cloister holds at most ``limit`` questions at once
(``proxy.max_held_per_cloister``); the next one is refused at once
(:class:`TooManyHeldError`), never queued. The hub keeps the same count for domains and
hostexec commands together and answers 429 past it, which ends the same way.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Protocol

import httpx

from cloister_core.hub import (
    SERVICE_AUTH_SCHEME,
    SERVICE_DOMAINS_PATH,
    DomainDecision,
    DomainRequest,
)

# The hub holds one connection per question: no pool limit, so the questions of one
# cloister (at most its max_held_per_cloister) never wait for those of another.
HUB_LIMITS = httpx.Limits(max_connections=None, max_keepalive_connections=32)


class HubUnavailableError(Exception):
    """The hub could not be asked, or answered something unusable."""


class TooManyHeldError(Exception):
    """The cloister already has as many questions waiting for a human as it may."""

    def __init__(self, cloister: str, held: int | None, limit: int | None, message: str) -> None:
        super().__init__(message)
        self.cloister = cloister
        self.held = held
        self.limit = limit


class ApprovalHub(Protocol):
    async def request_domain(
        self, request: DomainRequest, wait_seconds: float
    ) -> DomainDecision: ...


def hub_error_message(response: httpx.Response) -> str:
    """The ``error`` of the hub's JSON refusal, or the start of the body."""
    try:
        payload = response.json()
    except ValueError:
        payload = None
    if isinstance(payload, dict) and isinstance(payload.get("error"), str):
        return str(payload["error"])
    return response.text[:200]


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
        if response.status_code == 429:
            raise TooManyHeldError(request.cloister, None, None, hub_error_message(response))
        if response.status_code != 200:
            raise HubUnavailableError(
                f"hub answered {response.status_code}: {response.text[:200]!r}"
            )
        try:
            return DomainDecision.model_validate_json(response.content)
        except ValueError as error:
            raise HubUnavailableError(f"hub answered an invalid decision: {error}") from None


Outcome = DomainDecision | HubUnavailableError | TooManyHeldError | None


@dataclass(eq=False, slots=True)
class _Question:
    """One question to the hub and the clients waiting for its answer."""

    cloister: str
    task: asyncio.Task[Outcome] = field(init=False)  # set right after construction
    waiters: int = 0
    finished: bool = False


class PendingApprovals:
    """Single-flight questions, at most *limit* per cloister, withdrawn when unwanted."""

    def __init__(self, hub: ApprovalHub, tasks: asyncio.TaskGroup) -> None:
        self._hub = hub
        self._tasks = tasks
        self._questions: dict[tuple[str, str], _Question] = {}
        self._held: dict[str, int] = {}  # open questions per cloister

    @property
    def pending(self) -> int:
        return len(self._questions)

    def held(self, cloister: str) -> int:
        """Questions of *cloister* waiting for the hub now."""
        return self._held.get(cloister, 0)

    def _finish(self, key: tuple[str, str], question: _Question) -> None:
        # Called when the question ends or is withdrawn, whichever comes first.
        if question.finished:
            return
        question.finished = True
        if self._questions.get(key) is question:
            del self._questions[key]
        remaining = self._held.get(question.cloister, 1) - 1
        if remaining > 0:
            self._held[question.cloister] = remaining
        else:
            self._held.pop(question.cloister, None)

    async def _ask(
        self, key: tuple[str, str], question: _Question, request: DomainRequest, wait: float
    ) -> Outcome:
        # Runs in the server's task group: it must return, never raise, or it would
        # take the whole server down with it. Cancelled, it ends its HTTP request.
        try:
            async with asyncio.timeout(wait):
                return await self._hub.request_domain(request, wait)
        except TimeoutError:
            return None
        except (HubUnavailableError, TooManyHeldError) as error:
            return error
        except Exception as error:  # reported to the waiting clients, never raised here
            return HubUnavailableError(f"{type(error).__name__}: {error}")
        finally:
            self._finish(key, question)

    async def decide(
        self, request: DomainRequest, wait_seconds: float, *, limit: int
    ) -> DomainDecision | None:
        """The decision for *request*; None when nobody decided within *wait_seconds*.

        Raises :class:`TooManyHeldError` when *request* would be a new question and its
        cloister already has *limit* open, :class:`HubUnavailableError` if the hub could
        not be asked. A caller that is cancelled (its client went) stops waiting; the
        last one to go withdraws the question.
        """
        key = (request.cloister, request.host)
        question = self._questions.get(key)
        if question is None:
            held = self.held(request.cloister)
            if held >= limit:
                raise TooManyHeldError(
                    request.cloister,
                    held,
                    limit,
                    f"{held} requests of this cloister already wait for a human",
                )
            question = _Question(request.cloister)
            question.task = self._tasks.create_task(self._ask(key, question, request, wait_seconds))
            self._questions[key] = question
            self._held[request.cloister] = held + 1
        task = question.task
        question.waiters += 1
        try:
            # shield: one waiter that is cancelled must not cancel the shared question.
            outcome = await asyncio.shield(task)
        finally:
            question.waiters -= 1
            if question.waiters == 0 and not task.done():
                # Every client of this question has gone: withdraw it at once.
                self._finish(key, question)
                task.cancel()
        if isinstance(outcome, HubUnavailableError | TooManyHeldError):
            raise outcome
        return outcome
