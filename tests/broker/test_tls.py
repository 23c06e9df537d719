"""TLS over real sockets: `--tls-cert/--tls-key`, `kws://` clients verifying the broker, `--no-plaintext`.

The certificates are made at test time by `support.tls_certificates` (a CA
and a server certificate for localhost and 127.0.0.1 that it signed).
"""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path
from typing import Iterator

import pytest

import kittiwake
from kittiwake import errors
from support.auth_users import ALICE, standard_auth_file
from kittiwake.broker.tls import TlsSetupError, server_context
from support.broker_process import BrokerDidNotStart, BrokerProcess
from support.tls_certificates import Certificates


@pytest.fixture
def tls_broker(tmp_path: Path, certificates: Certificates) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path / "data", tls=certificates, auth_file=standard_auth_file(tmp_path / "users.json"))
    try:
        yield process
    finally:
        process.kill()


def test_both_ports_serve_and_the_listening_line_names_them(tls_broker: BrokerProcess) -> None:
    assert tls_broker.tls_port is not None and tls_broker.tls_port != tls_broker.port
    line = tls_broker.stdout_path.read_text()
    assert f"tls_port={tls_broker.tls_port} " in line and "auth=on" in line
    with kittiwake.Client(tls_broker.client_url(*ALICE, tls=True)) as secure:
        secure.enqueue("alice.jobs", b"over tls")
    with kittiwake.Client(tls_broker.client_url(*ALICE)) as plain:
        assert [task.data for task in plain.lease("alice.jobs")] == [b"over tls"]


def test_the_connection_is_tls_1_2_or_later_with_the_verified_certificate(tls_broker: BrokerProcess) -> None:
    with tls_broker.connect(tls=True) as conn:
        assert isinstance(conn.sock, ssl.SSLSocket)
        assert conn.sock.version() in ("TLSv1.2", "TLSv1.3")
        assert conn.auth(*ALICE).ok


def test_the_server_context_refuses_tls_below_1_2(certificates: Certificates) -> None:
    context = server_context(str(certificates.cert), str(certificates.key))
    assert context.minimum_version == ssl.TLSVersion.TLSv1_2


def test_a_key_that_does_not_fit_the_certificate_is_refused(certificates: Certificates) -> None:
    with pytest.raises(TlsSetupError, match="cannot use TLS certificate"):
        server_context(str(certificates.cert), str(certificates.elsewhere_key))


def test_the_async_client_over_tls(tls_broker: BrokerProcess) -> None:
    async def run() -> list[bytes]:
        async with kittiwake.AsyncClient(tls_broker.client_url(*ALICE, tls=True)) as client:
            await client.enqueue("alice.jobs", b"async tls")
            return [task.data for task in await client.lease("alice.jobs")]

    assert asyncio.run(run()) == [b"async tls"]


def test_the_ca_can_come_from_the_environment(tls_broker: BrokerProcess, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KITTIWAKE_CA", str(tls_broker.tls.ca))
    with kittiwake.Client(f"kws://{ALICE[0]}:{ALICE[1]}@127.0.0.1:{tls_broker.tls_port}") as client:
        assert client.ping()


def test_a_broker_signed_by_another_ca_is_refused_at_once(tls_broker: BrokerProcess) -> None:
    url = f"kws://{ALICE[0]}:{ALICE[1]}@127.0.0.1:{tls_broker.tls_port}?ca={tls_broker.tls.other_ca}"
    with kittiwake.Client(url, connect_timeout=600) as client:  # a retried refusal would hang the test
        with pytest.raises(errors.BrokerUnreachable, match="certificate verify failed"):
            client.ping()

    async def run() -> None:
        async with kittiwake.AsyncClient(url, connect_timeout=600) as client:
            with pytest.raises(errors.BrokerUnreachable, match="certificate verify failed"):
                await client.ping()

    asyncio.run(run())


def test_a_certificate_for_another_name_is_refused(tmp_path: Path, certificates: Certificates) -> None:
    # signed by the trusted CA, but for elsewhere.example: reached as 127.0.0.1 it must not be trusted
    elsewhere = Certificates(certificates.ca, certificates.elsewhere_cert, certificates.elsewhere_key,
                             certificates.other_ca, certificates.elsewhere_cert, certificates.elsewhere_key)
    with BrokerProcess(tmp_path / "data", tls=elsewhere) as broker:
        with kittiwake.Client(broker.client_url(tls=True), connect_timeout=600) as client:
            with pytest.raises(errors.BrokerUnreachable, match="certificate verify failed: .*mismatch"):
                client.ping()


def test_kws_to_the_plaintext_port_says_so(tls_broker: BrokerProcess) -> None:
    url = f"kws://127.0.0.1:{tls_broker.port}?ca={tls_broker.tls.ca}"
    with kittiwake.Client(url, connect_timeout=600) as client:
        with pytest.raises(errors.BrokerUnreachable, match="plaintext port"):
            client.ping()


def test_no_plaintext_leaves_only_the_tls_port(tmp_path: Path, certificates: Certificates) -> None:
    with BrokerProcess(tmp_path / "data", tls=certificates, plaintext=False,
                       auth_file=standard_auth_file(tmp_path / "users.json")) as broker:
        line = broker.stdout_path.read_text()
        assert "plaintext=off" in line and broker.port == broker.tls_port
        with kittiwake.Client(broker.client_url(*ALICE, tls=True)) as client:
            assert client.ping()
        # the default plaintext port of this broker was never opened: only one listening socket
        with broker.connect(tls=True) as conn:
            assert conn.auth(*ALICE).ok


def test_no_plaintext_without_tls_is_refused(tmp_path: Path) -> None:
    with pytest.raises(BrokerDidNotStart) as refused:
        BrokerProcess(tmp_path / "data", extra_args=["--no-plaintext"])
    assert refused.value.returncode == 2 and "only be closed when TLS is on" in refused.value.log_tail, refused.value


def test_tls_without_auth_works_too(tmp_path: Path, certificates: Certificates) -> None:
    with BrokerProcess(tmp_path / "data", tls=certificates) as broker:
        with kittiwake.Client(broker.client_url(tls=True)) as client:
            client.enqueue("open", b"x")
            assert client.stats("open")[0].size == 1
