"""What the proxy's and the gateway's settings share: the listen address, the defaults."""

from __future__ import annotations

import pytest

from cloister_core.stack import CREDENTIALS_PORT, PROXY_PORT
from cloister_proxy.credentials.settings import CredentialSettings
from cloister_proxy.service_settings import parse_listen
from cloister_proxy.settings import ProxySettings


def test_parse_listen() -> None:
    assert parse_listen(":3128") == ("0.0.0.0", 3128)
    assert parse_listen("[::1]:0") == ("::1", 0)


@pytest.mark.parametrize("value", ["3128", "host:", "host:99999", "host:x"])
def test_a_bad_listen_address_is_refused(value: str) -> None:
    with pytest.raises(ValueError, match="listen address must be HOST:PORT"):
        parse_listen(value)


def test_each_service_keeps_its_own_prefix_port_and_idle_timeout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CLOISTER_PROXY_AUDIT_STDOUT", "true")
    monkeypatch.setenv("CLOISTER_CREDENTIALS_HEADER_TIMEOUT", "3s")
    proxy, gateway = ProxySettings(), CredentialSettings()
    assert proxy.listen_address == ("0.0.0.0", PROXY_PORT)
    assert gateway.listen_address == ("0.0.0.0", CREDENTIALS_PORT)
    assert (proxy.audit_stdout, gateway.audit_stdout) == (True, False)
    assert (proxy.header_timeout.total_seconds(), gateway.header_timeout.total_seconds()) == (
        10,
        3,
    )
    assert proxy.idle_timeout.total_seconds() == 300
    assert gateway.idle_timeout.total_seconds() == 600
