"""The proxy's questions to the hub: single flight, a fair share per cloister, withdrawn
when the last client goes, and the hub's own refusal."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from cloister_core.hub import DomainDecision, DomainRequest
from cloister_proxy.approvals import (
    HttpApprovalHub,
    PendingApprovals,
    TooManyHeldError,
)


class HeldHub:
    """A hub whose answers the test gives; it records what was asked and withdrawn."""

    def __init__(self) -> None:
        self.asked: list[str] = []
        self.withdrawn: list[str] = []
        self.answers: dict[str, asyncio.Future[DomainDecision]] = {}

    async def request_domain(self, request: DomainRequest, wait_seconds: float) -> DomainDecision:
        self.asked.append(request.host)
        answer = self.answers[request.host] = asyncio.get_running_loop().create_future()
        try:
            decision: DomainDecision = await answer
        except asyncio.CancelledError:
            self.withdrawn.append(request.host)
            raise
        return decision


def ask(cloister: str, host: str) -> DomainRequest:
    return DomainRequest(cloister=cloister, project="p", host=host, port=443, wait_seconds=60)


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def test_a_cloister_gets_its_share_and_the_rest_is_refused_at_once() -> None:
    async def scenario() -> None:
        hub = HeldHub()
        async with asyncio.TaskGroup() as tasks:
            approvals = PendingApprovals(hub, tasks)
            held = [
                tasks.create_task(approvals.decide(ask("busy", f"h{n}.test"), 60, limit=3))
                for n in range(3)
            ]
            await settle()
            assert approvals.held("busy") == 3
            with pytest.raises(TooManyHeldError) as refused:
                await approvals.decide(ask("busy", "h4.test"), 60, limit=3)
            assert (refused.value.held, refused.value.limit) == (3, 3)
            # The same host again joins its question; another cloister has its own share.
            joined = tasks.create_task(approvals.decide(ask("busy", "h0.test"), 60, limit=3))
            other = tasks.create_task(approvals.decide(ask("quiet", "q.test"), 60, limit=3))
            await settle()
            assert hub.asked == ["h0.test", "h1.test", "h2.test", "q.test"]
            for answer in hub.answers.values():
                answer.set_result(DomainDecision(action="allow", scope="once"))
            results = [await task for task in (*held, joined, other)]
            assert all(result is not None and result.action == "allow" for result in results)
            assert (approvals.held("busy"), approvals.held("quiet"), approvals.pending) == (0, 0, 0)

    asyncio.run(scenario())


def test_the_question_is_withdrawn_when_its_last_client_goes() -> None:
    async def scenario() -> None:
        hub = HeldHub()
        async with asyncio.TaskGroup() as tasks:
            approvals = PendingApprovals(hub, tasks)
            first = tasks.create_task(approvals.decide(ask("api", "x.test"), 60, limit=1))
            second = tasks.create_task(approvals.decide(ask("api", "x.test"), 60, limit=1))
            await settle()
            first.cancel()
            await settle()
            assert hub.withdrawn == []  # one client still waits
            assert approvals.held("api") == 1
            second.cancel()
            await settle()
            assert hub.withdrawn == ["x.test"]
            # Its place is free at once: a new question may be asked.
            again = tasks.create_task(approvals.decide(ask("api", "y.test"), 60, limit=1))
            await settle()
            assert hub.asked == ["x.test", "y.test"]
            hub.answers["y.test"].set_result(DomainDecision(action="deny", scope="once"))
            decision = await again
            assert decision is not None
            assert decision.action == "deny"
        assert first.cancelled()
        assert second.cancelled()

    asyncio.run(scenario())


def test_the_hubs_429_is_a_refusal_with_its_reason() -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            429, json={"error": "cloister 'api' already has 16 requests waiting for a human"}
        )

    async def scenario() -> None:
        async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as client:
            hub = HttpApprovalHub("http://hub", "secret", client)
            async with asyncio.TaskGroup() as tasks:
                approvals = PendingApprovals(hub, tasks)
                with pytest.raises(TooManyHeldError) as refused:
                    await approvals.decide(ask("api", "x.test"), 5, limit=16)
        assert str(refused.value) == "cloister 'api' already has 16 requests waiting for a human"
        assert (refused.value.held, refused.value.limit) == (None, None)
        assert approvals.held("api") == 0

    asyncio.run(scenario())
