"""``cloister start``: the plan of a start, carrying it out, and its dry run.

:mod:`.plan` computes a :class:`~cloister_cli.start.plan.StartPlan` with nothing written
(``plan_start``; ``plan_image_part`` is the image part ``cloister images build`` plans
too), :mod:`.apply` carries it out, :mod:`.dryrun` renders it; :mod:`.ensure` brings up
what a start needs first (the guardian, Cloister's images), :mod:`.worktree` is where a
start works, :mod:`.devlifecycle` runs the devcontainer's lifecycle commands inside.
The commands import these modules by these names.
"""

__all__ = ["apply", "devlifecycle", "dryrun", "ensure", "plan", "worktree"]
