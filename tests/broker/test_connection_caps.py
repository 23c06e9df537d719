"""Caps per user and per address: no one client takes every connection of a broker with users.

Over real sockets, as an outsider would: a user with a right on one queue
opening connection after connection, and anyone who can reach a port
opening connections it never authenticates (binary) or that carry no
credentials (HTTP). Each is refused at its own cap with `TOO_MANY_CONNECTIONS`
(HTTP: 503) while other users and other addresses are still served.
`ConnectionSlots` itself is checked against a model.
"""

from __future__ import annotations

import base64
import http.client
import socket
import threading
import time
from contextlib import ExitStack
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kittiwake import Client, errors
from kittiwake.broker.connection_slots import ConnectionSlots
from support.auth_users import ALICE, BOB, standard_auth_file
from support.broker_process import BrokerProcess, RawConnection


def _eventually_authenticates(broker: BrokerProcess, user: tuple[str, str], source: str | None = None) -> RawConnection:
    """A connection of `user`, tried until the broker has seen a closed one go (its slot back)."""
    deadline = time.monotonic() + 10
    while True:
        conn = broker.connect(source=source)
        reply = conn.auth(*user)
        if reply.ok:
            return conn
        conn.close()
        assert reply.error["code"] == "TOO_MANY_CONNECTIONS" and time.monotonic() < deadline, reply
        time.sleep(0.05)


def test_one_user_cannot_hold_every_connection(tmp_path: Path) -> None:
    auth_file = standard_auth_file(tmp_path / "users.json")
    with BrokerProcess(tmp_path / "data", auth_file=auth_file, extra_args=["--max-connections-per-user", "3"]) as broker, \
            ExitStack() as held:
        alice = [held.enter_context(broker.connect()) for _ in range(3)]
        for conn in alice:
            assert conn.auth(*ALICE).ok
        with broker.connect() as fourth:
            request_id = fourth.send("auth", user=ALICE[0], token=ALICE[1])
            replies = fourth.read_until_closed()
        assert [(reply.id, reply.error["code"]) for reply in replies] == [(request_id, "TOO_MANY_CONNECTIONS")]
        assert "'alice' holds 3 connections, the cap per user" in replies[0].error["message"]
        with broker.connect() as bob:  # another user is served
            assert bob.auth(*BOB).ok
            bob.enqueue("bob.work", b"x")
        assert alice[0].call("stats", queues=["alice.q"]) is not None  # alice's own keep working
        threading.Timer(0.5, alice.pop().close).start()
        # a client over the cap waits within its connect budget: it gets the slot given back
        with Client(f"kw://{ALICE[0]}:{ALICE[1]}@{broker.host}:{broker.port}", connect_timeout=10) as client:
            client.enqueue("alice.work", b"y")


def test_connections_that_never_authenticate_are_capped_per_address(tmp_path: Path) -> None:
    auth_file = standard_auth_file(tmp_path / "users.json")
    with BrokerProcess(tmp_path / "data", auth_file=auth_file,
                       extra_args=["--max-unauthenticated-per-address", "4", "--http-port", "0"]) as broker, \
            ExitStack() as held:
        silent = [held.enter_context(broker.connect(source="127.0.0.1")) for _ in range(4)]
        time.sleep(0.3)  # accepted and counted
        with broker.connect(source="127.0.0.1") as fifth:
            replies = fifth.read_until_closed()
        assert [(reply.id, reply.error["code"]) for reply in replies] == [(0, "TOO_MANY_CONNECTIONS")]
        assert "not authenticated, the cap per address" in replies[0].error["message"]
        assert broker.http_port is not None
        with socket.create_connection((broker.host, broker.http_port), source_address=("127.0.0.1", 0)) as web:
            web.settimeout(10)
            assert web.recv(4096).startswith(b"HTTP/1.1 503 ")  # the HTTP face counts by address too
        with broker.connect(source="127.0.0.2") as other:  # another address is served
            assert other.auth(*ALICE).ok
        assert silent[0].auth(*ALICE).ok  # an authenticated connection is its user's, not its address's
        with _eventually_authenticates(broker, BOB, source="127.0.0.1") as bob:
            bob.enqueue("bob.work", b"x")


def test_a_broker_without_users_caps_nothing_but_the_total(tmp_path: Path) -> None:
    with BrokerProcess(tmp_path / "data", extra_args=["--max-unauthenticated-per-address", "2"]) as broker, \
            ExitStack() as held:
        for _ in range(5):
            held.enter_context(broker.connect()).call("ping")


# ----------------------------------------------------------------- the model

_OPS = st.lists(
    st.tuples(st.sampled_from(["take", "to_user", "give_back"]), st.sampled_from(["a", "b", None]),
              st.sampled_from(["u", "v"]), st.integers(0, 20)),
    max_size=80,
)


@settings(max_examples=200, deadline=None)
@given(limit=st.integers(1, 6), per_address=st.integers(0, 3), per_user=st.integers(0, 3), ops=_OPS)
def test_connection_slots_match_a_model(limit: int, per_address: int, per_user: int,
                                        ops: list[tuple[str, str | None, str, int]]) -> None:
    slots = ConnectionSlots(limit, per_address=per_address, per_user=per_user)
    open_: list[tuple[str | None, str | None]] = []  # (address, user) of each connection held
    for op, address, user, pick in ops:
        if op == "take":
            by_address = sum(1 for a, u in open_ if a == address and u is None)
            expect = len(open_) < limit and not (address is not None and per_address and by_address >= per_address)
            assert (slots.take(0.0, "binary", address) is None) is expect
            if expect:
                open_.append((address, None))
        elif op == "to_user":
            waiting = [i for i, (_, u) in enumerate(open_) if u is None]
            if not waiting:
                continue
            index = waiting[pick % len(waiting)]
            by_user = sum(1 for _, u in open_ if u == user)
            expect = not (per_user and by_user >= per_user)
            assert (slots.to_user(0.0, "binary", open_[index][0], user) is None) is expect
            if expect:
                open_[index] = (open_[index][0], user)
        elif open_:
            gone_address, gone_user = open_.pop(pick % len(open_))
            slots.give_back(gone_address, gone_user)
        assert slots.held == len(open_)
        if per_address:
            expected = {a: sum(1 for x, u in open_ if x == a and u is None) for a, _ in open_ if a is not None}
            assert slots.by_address == {a: n for a, n in expected.items() if n}
        assert slots.by_user == {u: sum(1 for _, x in open_ if x == u) for _, u in open_ if u is not None}


def test_an_http_connection_that_showed_valid_credentials_counts_as_its_users(tmp_path: Path) -> None:
    """SQS and dashboard requests carry credentials one by one: a connection counts as its address's
    until one of its requests checks out, then as its user's — a fleet of signed clients on one host
    is not held to the cap of connections nobody is known for."""
    auth_file = standard_auth_file(tmp_path / "users.json")
    basic = "Basic " + base64.b64encode(f"{ALICE[0]}:{ALICE[1]}".encode()).decode()
    with BrokerProcess(tmp_path / "data", auth_file=auth_file,
                       extra_args=["--max-unauthenticated-per-address", "2", "--http-port", "0"]) as broker:
        assert broker.http_port is not None
        signed = []
        try:
            for _ in range(4):  # twice the cap, each kept open
                connection = http.client.HTTPConnection(broker.host, broker.http_port, timeout=10)
                connection.request("GET", "/api/queues", headers={"Authorization": basic})
                response = connection.getresponse()
                response.read()
                assert response.status == 200
                signed.append(connection)
            silent = [socket.create_connection((broker.host, broker.http_port)) for _ in range(2)]
            time.sleep(0.3)
            with socket.create_connection((broker.host, broker.http_port)) as third:
                third.settimeout(10)
                assert third.recv(4096).startswith(b"HTTP/1.1 503 ")  # the unauthenticated ones are capped
            for sock in silent:
                sock.close()
        finally:
            for connection in signed:
                connection.close()


def test_a_client_over_its_users_cap_is_told_so_when_its_connect_budget_ends(tmp_path: Path) -> None:
    auth_file = standard_auth_file(tmp_path / "users.json")
    with BrokerProcess(tmp_path / "data", auth_file=auth_file, extra_args=["--max-connections-per-user", "1"]) as broker, \
            broker.connect() as held:
        assert held.auth(*ALICE).ok
        with Client(f"kw://{ALICE[0]}:{ALICE[1]}@{broker.host}:{broker.port}", connect_timeout=3) as client:
            with pytest.raises(errors.TooManyConnections, match="the cap per user"):
                client.ping()
