"""Images: Cloister's own, a project's (devcontainer, Features, .cloister/Dockerfile),
and the shape a human approves before a build."""
