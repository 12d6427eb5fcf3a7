"""Reading a file of the devcontainer the agent may have written: one way, with the error
of the reader's kind (:class:`~cloister_core.devcontainer.model.DevcontainerError`,
:class:`~cloister_core.devcontainer.featuremeta.FeatureError`) naming what it is."""

from __future__ import annotations

import errno
from collections.abc import Callable
from pathlib import Path

from cloister_core.beneath import NotRegularError, TooLargeError, read_file_bounded


def read_agent_text(
    path: Path,
    limit: int,
    what: str,
    error: Callable[[Path, str], Exception],
    *,
    follow_links: bool = True,
) -> str:
    """*path*'s UTF-8 text, a regular file of at most *limit* bytes (see
    :func:`cloister_core.beneath.read_file_bounded`); anything else is *error*."""
    try:
        data = read_file_bounded(path, limit, follow_links=follow_links)
    except NotRegularError:
        raise error(path, f"{what} is not a regular file") from None
    except TooLargeError:
        raise error(path, f"{what} over {_size(limit)} is refused") from None
    except OSError as failure:
        linked = not follow_links and failure.errno == errno.ELOOP
        problem = "it is a symbolic link" if linked else failure.strerror or str(failure)
        raise error(path, f"cannot read {what}: {problem}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as failure:
        raise error(path, f"cannot read {what}: {failure}") from None


def _size(limit: int) -> str:
    if limit % (1024 * 1024) == 0:
        return f"{limit // (1024 * 1024)} MiB"
    if limit % 1024 == 0:
        return f"{limit // 1024} KiB"
    return f"{limit} bytes"
