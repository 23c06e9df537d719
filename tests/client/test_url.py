"""Broker URLs: `kw://host:port`, the environment default, and clear refusals."""

from __future__ import annotations

import pytest

from kittiwake.client.url import DEFAULT_PORT, DEFAULT_URL, URL_ENV, BrokerAddress, parse_url
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
        ("kw://user:secret@localhost:7370", "credentials"),
        ("kw://localhost:7370/queues", "path"),
        ("kw://localhost:7370?x=1", "query"),
    ],
)
def test_bad_urls_are_refused_with_the_reason(url: str, reason: str) -> None:
    with pytest.raises(BadRequest, match=reason) as caught:
        parse_url(url)
    assert caught.value.code == "BAD_REQUEST"


def test_a_non_string_is_refused() -> None:
    with pytest.raises(BadRequest):
        parse_url(7370)  # type: ignore[arg-type]
