"""The approval hub's API from the host: tokens, and approvals from a terminal.

The hub answers only to its own Host (DNS-rebinding guard), so requests name
``127.0.0.1:<ui_port>`` exactly; they send no Origin, like any non-browser client.

It speaks HTTP with requests, which the docker SDK loads anyway: importing httpx as
well would add about 0.2 s to every ``cloister start``.
"""

from __future__ import annotations

from typing import Any

import requests

from cloister_core.errors import CloisterError
from cloister_core.tokens import TokenRecord


class HubError(CloisterError):
    """The hub could not be reached, or refused."""


class HubClient:
    def __init__(self, port: int, timeout: float = 5.0) -> None:
        self.base = f"http://127.0.0.1:{port}"
        self._timeout = timeout

    def _call(self, method: str, path: str, json: Any = None) -> Any:
        try:
            response = requests.request(method, self.base + path, json=json, timeout=self._timeout)
        except requests.RequestException as error:
            raise HubError(
                f"the approval hub at {self.base} is not reachable ({error});"
                " is the guardian running? (`cloister guardian status`)"
            ) from None
        if response.status_code >= 400:
            try:
                message = response.json().get("error", response.text)
            except ValueError:
                message = response.text
            raise HubError(f"the hub refused: {message}")
        return response.json() if response.content else None

    def register(self, record: TokenRecord) -> None:
        self._call(
            "POST",
            "/api/v1/tokens",
            {
                "token": record.secret,
                "cloister": record.cloister,
                "project": record.project,
                "branch": record.branch,
                "path": record.path,
            },
        )

    def revoke(self, cloister: str) -> None:
        self._call("DELETE", f"/api/v1/tokens/{cloister}")

    def pending(self) -> dict[str, list[dict[str, Any]]]:
        result: dict[str, list[dict[str, Any]]] = self._call("GET", "/api/v1/pending")
        return result

    def decide(
        self, item_id: str, *, allow: bool, scope: str, wildcard: bool, reason: str | None
    ) -> dict[str, Any]:
        """Decide a pending domain (allow/deny at *scope*) or command (approve/deny)."""
        pending = self.pending()
        if any(item["id"] == item_id for item in pending["domains"]):
            path = f"/api/v1/domains/{item_id}/decision"
            body: dict[str, Any] = {
                "action": "allow" if allow else "deny",
                "scope": scope,
                "wildcard": wildcard,
            }
        elif any(item["id"] == item_id for item in pending["commands"]):
            path = f"/api/v1/commands/{item_id}/decision"
            body = {"action": "approve" if allow else "deny", "reason": reason}
        else:
            raise HubError(f"nothing pending with id {item_id!r} (`cloister approvals list`)")
        result: dict[str, Any] = self._call("POST", path, body)
        return result
