"""The human's repository and the cloister's own git directory, worktrees and mounts."""
