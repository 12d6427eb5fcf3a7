"""A cloister's container: its plan, network, ports, services, accounts and logs."""

# The modules the commands use (imported when first used: this package stays cheap).
__all__ = [
    "cloisterlogs",
    "cloisters",
    "listing",
    "ports",
    "services",
]
