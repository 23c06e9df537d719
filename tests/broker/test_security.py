"""Security settings: validated at start, and what the broker says about who can reach it."""

from __future__ import annotations

import pytest

from kittiwake.broker.config import BrokerConfig
from kittiwake.broker.security import SecurityConfig, exposure_note, exposure_warnings, is_loopback
from support.broker_process import BrokerProcess


@pytest.mark.parametrize(
    "fields, reason",
    [
        ({"tls_cert": "c.pem"}, "go together"),
        ({"tls_key": "k.pem"}, "go together"),
        ({"plaintext": False}, "only be closed when TLS is on"),
        ({"tls_port": 70000}, "tls_port"),
        ({"auth_file": ""}, "non-empty path"),
        ({"auth_timeout_secs": 0}, "auth_timeout_secs"),
    ],
)
def test_bad_settings_are_refused(fields: dict, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        SecurityConfig(**fields)


def test_the_default_broker_is_loopback_only_and_open() -> None:
    config = BrokerConfig()
    assert config.host == "127.0.0.1" and config.security == SecurityConfig()
    assert exposure_note(config.host, config.security) == "loopback only, no auth"
    assert exposure_warnings(config.host, config.security) == []


@pytest.mark.parametrize("host, loopback", [("127.0.0.1", True), ("127.8.0.1", True), ("::1", True),
                                            ("localhost", True), ("0.0.0.0", False), ("::", False),
                                            ("10.1.2.3", False), ("broker.internal", False)])
def test_loopback(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def test_beyond_the_loopback_without_auth_or_in_plaintext_it_warns() -> None:
    [warning] = exposure_warnings("0.0.0.0", SecurityConfig())
    assert "without --auth-file" in warning and "every queue" in warning
    [warning] = exposure_warnings("0.0.0.0", SecurityConfig(auth_file="users.json"))
    assert "plaintext" in warning
    closed = SecurityConfig(auth_file="users.json", tls_cert="c.pem", tls_key="k.pem", plaintext=False)
    assert exposure_warnings("0.0.0.0", closed) == []
    assert exposure_note("0.0.0.0", closed) == "reachable from the network, auth from users.json"


def test_the_start_line_says_the_broker_is_loopback_only(broker: BrokerProcess) -> None:
    line = next(line for line in broker.log_path.read_text().splitlines() if "broker started on" in line)
    assert "127.0.0.1" in line and "(loopback only, no auth)" in line
    assert "auth=off" in broker.stdout_path.read_text()


def test_a_broker_on_every_interface_without_auth_warns_at_start(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with BrokerProcess(tmp_path / "data", host="0.0.0.0") as broker:
        log = broker.log_path.read_text()
    assert "(reachable from the network, no auth)" in log
    assert "WARNING kittiwake.broker: listening on 0.0.0.0 without --auth-file" in log
