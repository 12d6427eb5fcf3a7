"""Files Cloister mounts into every cloister (read-only), and the code that plans them.

``bin/git`` and ``profile/cloister-git-guardrails.sh`` are the git guardrails
(:mod:`cloister_cli.inside.guardrails`). They are package data: found next to this file
in an editable install and in a wheel alike, and bind-mounted from there.
"""
