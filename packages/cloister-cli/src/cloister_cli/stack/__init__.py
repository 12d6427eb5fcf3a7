"""The guardian stack on this machine: its containers, the hub's client, the host
executor, ``doctor`` and ``uninstall``."""
