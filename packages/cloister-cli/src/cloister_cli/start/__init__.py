"""``cloister start``: the plan of a start, carrying it out, and its dry run."""
