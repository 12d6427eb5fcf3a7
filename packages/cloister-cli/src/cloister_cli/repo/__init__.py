"""The human's repository and the cloister's own git directory, worktrees and mounts."""

# The modules the commands use (imported when first used: this package stays cheap).
__all__ = [
    "git",
    "gitdirs",
    "projects",
    "refs",
]
