"""A cluster on a map that says `tls = true`, over real sockets: its nodes listen for TLS only
(`--no-plaintext`) at the map's addresses and announce to each other over TLS as their cluster user,
verifying each other's certificates (`--cluster-ca`); a `kws://` client routes across them and
`kittiwake cluster status` and the dashboard's cluster page read them; nodes that cannot verify their peers' certificates tell
them nothing; options that contradict the map are usage errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kittiwake import Client
from kittiwake.client.calls import Call, request
from kittiwake.protocol.replies import result_decoder
from kittiwake.testing.cluster_nodes import ClusterNodes, cluster_file_text, free_ports
from support.tls_certificates import Certificates

from .test_dashboard import by_node, poll

POLL_SECS = 10.0
NODE = ("node", "node-token-0123456789")
APP = ("app", "app-token-0123456789")


def cluster_call(client: Client, op: str, **fields: Any) -> Any:
    return client._run(Call(request(op, fields), result_decoder(op)), None)


def with_user(url: str, user: tuple[str, str]) -> str:
    scheme, _, rest = url.partition("://")
    return f"{scheme}://{user[0]}:{user[1]}@{rest}"


@pytest.fixture(scope="module")
def auth_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("auth") / "users.json"
    for (user, token), rights in ((NODE, "*=all"), (APP, "jobs*=produce,consume")):
        subprocess.run([sys.executable, "-m", "kittiwake", "auth", "add-user", user, "--rights", rights,
                        "--token", token, "--file", str(path)], check=True, capture_output=True, timeout=60)
    return path


@pytest.fixture(scope="module")
def tls_nodes(tmp_path_factory: pytest.TempPathFactory, certificates: Certificates,
              auth_file: Path) -> Iterator[ClusterNodes]:
    args = ["--durability", "os", "--no-plaintext", "--http-port", "0", "--auth-file", str(auth_file),
            "--cluster-user", NODE[0], "--cluster-token", NODE[1]]
    with ClusterNodes(tmp_path_factory.mktemp("tls-cluster"), ["a", "b", "c"], args=args,
                      tls_cert=certificates.cert, tls_key=certificates.key, ca_file=certificates.ca) as nodes:
        yield nodes


def test_a_kws_client_routes_over_tls_and_the_nodes_announce_over_tls(tls_nodes: ClusterNodes) -> None:
    assert "tls = true" in tls_nodes.map_path.read_text()
    with Client(with_user(tls_nodes.url, APP)) as client:
        client.enqueue_many([{"queue": "jobs", "data": b"%d" % i} for i in range(30)])
        assert client.cluster_map is not None and client.cluster_map.tls
        with Client(f"kws://{NODE[0]}:{NODE[1]}@{tls_nodes.addresses['b']}{tls_nodes.query}") as b:  # b learns over TLS which of its peers hold tasks
            deadline = time.monotonic() + POLL_SECS
            while set(cluster_call(b, "holders", queues=["jobs"]).holders["jobs"]) != {"a", "b", "c"}:
                assert time.monotonic() < deadline, tls_nodes["a"].log_tail()
                time.sleep(0.05)
        seen = []
        while len(seen) < 30:
            leases = client.lease("jobs", max_tasks=10, lease_secs=30, wait_secs=2)
            assert leases, f"{len(seen)} of 30 delivered"
            client.dequeue(leases)
            seen += [bytes(lease.data) for lease in leases]
        assert sorted(seen) == sorted(b"%d" % i for i in range(30))


def test_cluster_status_reads_a_tls_map_over_tls(tls_nodes: ClusterNodes, certificates: Certificates) -> None:
    env = {**os.environ, "KITTIWAKE_CA": str(certificates.ca),
           "KITTIWAKE_URL": with_user(f"kws://{tls_nodes.addresses['a']}", NODE)}
    done = subprocess.run([sys.executable, "-m", "kittiwake", "cluster", "status", "--cluster",
                           str(tls_nodes.map_path), "--json"], capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 0, done.stderr + done.stdout
    report = json.loads(done.stdout)
    assert sorted(node["name"] for node in report["nodes"] if node["up"]) == ["a", "b", "c"]


def test_the_dashboards_cluster_page_reads_the_peers_over_tls(tls_nodes: ClusterNodes) -> None:
    answer = poll(tls_nodes["c"], lambda found: all(node["up"] for node in found["nodes"]), NODE)
    assert sorted(by_node(answer)) == ["a", "b", "c"]


def test_nodes_that_cannot_verify_their_peers_tell_them_nothing(tmp_path: Path, certificates: Certificates) -> None:
    # each node trusts a CA that signed nothing here: every announcement's handshake fails
    with ClusterNodes(tmp_path, ["a", "b"], args=["--durability", "os"], tls_cert=certificates.cert,
                      tls_key=certificates.key, ca_file=certificates.other_ca) as nodes:
        a_url = f"kws://{nodes.addresses['a']}?ca={certificates.ca}"
        b_url = f"kws://{nodes.addresses['b']}?ca={certificates.ca}"
        with Client(a_url) as a, Client(b_url) as b:
            a.enqueue("jobs", b"x")
            assert cluster_call(a, "holders", queues=["jobs"]).holders["jobs"] == ["a"]
            time.sleep(2.0)  # dozens of announcement attempts (every 50 ms, with backoff)
            assert cluster_call(b, "holders", queues=["jobs"]).holders["jobs"] == []


def run_broker(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kittiwake.broker", "--durability", "os", *args],
                          capture_output=True, text=True, timeout=60)


def test_options_that_contradict_the_map_are_usage_errors(tmp_path: Path, certificates: Certificates) -> None:
    port, tls_port = free_ports(2)
    tls_map, plain_map = tmp_path / "tls.toml", tmp_path / "plain.toml"
    tls_map.write_text(cluster_file_text([("a", f"127.0.0.1:{tls_port}")], tls=True))
    plain_map.write_text(cluster_file_text([("a", f"127.0.0.1:{port}")]))
    tls = ["--tls-cert", str(certificates.cert), "--tls-key", str(certificates.key)]
    for args, says in (
        (["--cluster", str(tls_map), "--port", str(port)], "tls = true"),
        (["--cluster", str(tls_map), *tls, "--tls-port", str(port)], "--tls-port"),
        (["--cluster", str(plain_map), "--port", str(port), "--cluster-ca", str(certificates.ca)], "plaintext ports"),
        (["--cluster", str(plain_map), "--port", str(port), *tls, "--tls-port", str(tls_port), "--no-plaintext"],
         "--no-plaintext"),
    ):
        done = run_broker("--data", str(tmp_path / "data"), "--node", "a", *args)
        assert done.returncode == 2 and says in done.stderr, (args, done.stderr)
