"""The guardian stack on this machine: its containers, the hub's client, the host
executor, ``doctor`` and ``uninstall``."""

# The modules the commands use (imported when first used: this package stays cheap).
__all__ = [
    "doctor",
    "executor_process",
    "guardian",
    "hub_client",
    "uninstall",
]
