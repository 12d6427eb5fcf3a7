"""What the credential gateway says when the address guard refuses an upstream (pure)."""

from __future__ import annotations

from cloister_proxy.addresses import AddressCheck


def guard_refusal(host: str, refused: AddressCheck) -> str:
    """The reason, for the audit line and the agent's 502 body."""
    if refused.guardian:
        return (
            f"{host} resolves to {refused.address} ({refused.address_class}), one of the"
            " guardian's own networks, which is never an upstream"
            " (proxy.allow_private_networks cannot open it)"
        )
    return (
        f"{host} resolves to {refused.address} ({refused.address_class}),"
        " which the proxy's address guard refuses (proxy.allow_private_networks)"
    )
