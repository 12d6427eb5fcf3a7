"""Images: Cloister's own, a project's (devcontainer, Features, .cloister/Dockerfile),
and the shape a human approves before a build."""

# The modules the commands use (imported when first used: this package stays cheap).
__all__ = [
    "builds",
    "features",
    "projectimages",
    "shape",
]
