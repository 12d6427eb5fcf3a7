"""The stack's names: nothing a cloister resolves may be a name a cloister can take."""

from __future__ import annotations

import pytest

from cloister_core import stack
from cloister_core.errors import CloisterNameError
from cloister_core.names import CONTAINER_PREFIX, validate_cloister_name


@pytest.mark.parametrize("alias", [*stack.ALIASES, *map(stack.container, stack.SERVICES)])
def test_no_cloister_can_be_named_like_a_service(alias: str) -> None:
    # A cloister's container, cloister-<name>, is a DNS name on cloister-net: a project
    # called "proxy" must not answer for the proxy (and collect every cloister's token).
    assert alias.startswith(CONTAINER_PREFIX)
    with pytest.raises(CloisterNameError, match="reserved"):
        validate_cloister_name(alias.removeprefix(CONTAINER_PREFIX))


def test_addresses() -> None:
    assert stack.credentials_url("/claude") == "http://cloister-guardian-credentials:9997/claude"
    assert stack.container("proxy") == stack.PROXY_ALIAS


def test_the_sync_containers_names() -> None:
    # The throwaway export containers carry their own label, never a cloister's.
    assert stack.LABEL_SYNC.startswith("org.cloister.")
    assert stack.LABEL_SYNC not in {stack.LABEL_CLOISTER, stack.LABEL_PROJECT}
    assert stack.GIT_IMAGE.startswith("cloister-git")
    assert ":" in stack.GIT_IMAGE  # a tag: never whatever "latest" a registry has
