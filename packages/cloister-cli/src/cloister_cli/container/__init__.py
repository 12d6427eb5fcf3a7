"""A cloister's container: its plan, network, ports, services, accounts and logs."""
