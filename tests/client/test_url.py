"""Broker URLs: `kw://host:port`, credentials, `kws://` with its CA, the environment default, and clear refusals."""

from __future__ import annotations

import pytest

from kittiwake.client.url import CA_ENV, DEFAULT_PORT, DEFAULT_TLS_PORT, DEFAULT_URL, URL_ENV, BrokerAddress, parse_url
from kittiwake.errors import BadRequest


def test_host_and_port() -> None:
    assert parse_url("kw://example.org:9000") == BrokerAddress("example.org", 9000)


def test_port_defaults_to_7370() -> None:
    assert parse_url("kw://10.0.0.5") == BrokerAddress("10.0.0.5", DEFAULT_PORT)


def test_ipv6_in_brackets() -> None:
    address = parse_url("kw://[::1]:7400")
    assert address == BrokerAddress("::1", 7400)
    assert address.url == "kw://[::1]:7400"


def test_trailing_slash_is_tolerated() -> None:
    assert parse_url("kw://localhost:7371/") == BrokerAddress("localhost", 7371)


def test_none_reads_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(URL_ENV, "kw://broker.internal:7444")
    assert parse_url(None) == BrokerAddress("broker.internal", 7444)


def test_none_without_environment_is_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(URL_ENV, raising=False)
    assert parse_url(None).url == DEFAULT_URL


def test_an_address_passes_through() -> None:
    address = BrokerAddress("h", 1)
    assert parse_url(address) is address


@pytest.mark.parametrize(
    "url, reason",
    [
        ("localhost:7370", "must look like"),
        ("http://localhost:7370", "scheme"),
        ("kw://localhost:notaport", "malformed"),
        ("kw://localhost:70000", "malformed"),
        ("kw://localhost:0", "port 0"),
        ("kw://:7370", "no host"),
        ("kw://user@localhost:7370", "credentials are user:token"),
        ("kw://:secret@localhost:7370", "credentials are user:token"),
        ("kw://user:@localhost:7370", "credentials are user:token"),
        ("kw://localhost:7370/queues", "path"),
        ("kw://localhost:7370?x=1", "only query parameter is ca"),
        ("kw://localhost:7370?ca=/ca.pem", "needs kws"),
        ("kws://localhost?ca=", "only query parameter is ca"),
        ("kws://localhost?ca=a&ca=b", "only query parameter is ca"),
    ],
)
def test_bad_urls_are_refused_with_the_reason(url: str, reason: str) -> None:
    with pytest.raises(BadRequest, match=reason) as caught:
        parse_url(url)
    assert caught.value.code == "BAD_REQUEST"


def test_a_non_string_is_refused() -> None:
    with pytest.raises(BadRequest):
        parse_url(7370)  # type: ignore[arg-type]


def test_credentials_are_parsed_and_never_shown() -> None:
    address = parse_url("kw://alice:s3cret-token@broker:7400")
    assert (address.user, address.token, address.host, address.port) == ("alice", "s3cret-token", "broker", 7400)
    assert "s3cret" not in address.url and "s3cret" not in str(address) and "s3cret" not in repr(address)
    assert address.url == "kw://alice@broker:7400"


def test_credentials_are_percent_decoded() -> None:
    address = parse_url("kw://al%40ice:to%3Ak%2Fen@broker")
    assert (address.user, address.token) == ("al@ice", "to:k/en")


def test_a_refused_url_does_not_show_its_token() -> None:
    with pytest.raises(BadRequest) as caught:
        parse_url("kw://alice:s3cret-token@broker:7400/path")
    assert "s3cret" not in caught.value.message and "alice:***@broker" in caught.value.message


def test_kws_defaults_to_the_tls_port_and_the_system_cas(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(CA_ENV, raising=False)
    address = parse_url("kws://broker")
    assert (address.tls, address.port, address.ca_file) == (True, DEFAULT_TLS_PORT, None)
    assert address.url == f"kws://broker:{DEFAULT_TLS_PORT}"


def test_kws_takes_its_ca_from_the_url_then_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CA_ENV, "/etc/kittiwake/ca.pem")
    assert parse_url("kws://broker:7371").ca_file == "/etc/kittiwake/ca.pem"
    address = parse_url("kws://u:t@broker:7371?ca=/tmp/my%20ca.pem")
    assert address.ca_file == "/tmp/my ca.pem"
    assert parse_url("kw://broker").ca_file is None  # plaintext ignores the environment
