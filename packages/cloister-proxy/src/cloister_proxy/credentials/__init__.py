"""The credential gateway: agents' API calls, with the real credential in place of the
cloister token (a second service of this package, same image, its own container)."""
