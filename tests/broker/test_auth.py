"""Authentication over real sockets: `--auth-file`, the `auth` op, both clients, and a brute force.

A broker started with an auth file lets a connection do nothing before it
sent valid credentials; wrong ones get `UNAUTHORIZED` and the connection is
closed. Guessing costs the broker close to nothing and is logged once per
source address, not once per try.
"""

from __future__ import annotations

import asyncio
import os
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Iterator

import pytest

import kittiwake
from kittiwake import errors
from support.auth_users import ALICE, BOB, ROOT, standard_auth_file, write_auth_file
from support.broker_process import BrokerDidNotStart, BrokerProcess, RawConnection


@pytest.fixture
def secured(tmp_path: Path) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path / "data", auth_file=standard_auth_file(tmp_path / "users.json"))
    try:
        yield process
    finally:
        process.kill()


def assert_closed_with(conn: RawConnection, code: str, request_id: int = 0) -> None:
    replies = conn.read_until_closed()
    assert [(reply.id, reply.error["code"]) for reply in replies] == [(request_id, code)], replies


def test_right_credentials_open_the_connection(secured: BrokerProcess) -> None:
    with secured.connect() as conn:
        reply = conn.auth(*ROOT)
        assert reply.ok and reply.result == {"user": "root"}
        conn.enqueue("jobs", b"x")
        assert [task["data"] for task in conn.lease("jobs")] == [b"x"]


@pytest.mark.parametrize(
    "user, token",
    [(ROOT[0], "not-the-token-0123456789"), ("nobody", ROOT[1]), (ALICE[0], BOB[1])],
    ids=["wrong-token", "unknown-user", "another-users-token"],
)
def test_wrong_credentials_are_refused_and_the_connection_closed(secured: BrokerProcess, user: str, token: str) -> None:
    with secured.connect() as conn:
        request_id = conn.send("auth", user=user, token=token)
        assert_closed_with(conn, "UNAUTHORIZED", request_id)


def test_a_request_before_auth_is_refused_and_closes(secured: BrokerProcess) -> None:
    with secured.connect() as conn:
        conn.send("enqueue", tasks=[{"queue": "jobs", "data": b"sneaky"}])
        assert_closed_with(conn, "UNAUTHORIZED")
    with secured.connect() as conn:
        conn.auth(*ROOT)
        assert conn.call("list_queues") == []  # nothing of it ran


def test_auth_and_requests_pipelined_in_one_write_are_answered_in_order(secured: BrokerProcess) -> None:
    with secured.connect() as conn:
        conn.send_raw(
            RawConnection.frame("auth", 1, user=ALICE[0], token=ALICE[1])
            + RawConnection.frame("enqueue", 2, tasks=[{"queue": "alice.jobs", "data": b"a"}])
            + RawConnection.frame("enqueue", 3, tasks=[{"queue": "bob.jobs", "data": b"b"}])
            + RawConnection.frame("ping", 4)
        )
        replies = conn.read_replies(4)
        assert [reply.id for reply in replies] == [1, 2, 3, 4]
        assert replies[0].ok and replies[1].ok and replies[3].ok
        assert replies[2].error["code"] == "FORBIDDEN"


def test_a_second_auth_is_a_bad_request_and_the_connection_stays(secured: BrokerProcess) -> None:
    with secured.connect() as conn:
        conn.auth(*ALICE)
        reply = conn.auth(*ROOT)
        assert not reply.ok and reply.error["code"] == "BAD_REQUEST"
        reply = conn.request("enqueue", tasks=[{"queue": "bob.jobs", "data": b"x"}])
        assert reply.error["code"] == "FORBIDDEN"  # still alice


def test_without_an_auth_file_auth_is_accepted_and_changes_nothing(broker: BrokerProcess) -> None:
    with broker.connect() as conn:
        reply = conn.auth("anyone", "any-token-0123456789")
        assert reply.ok and reply.result == {"user": None}
        assert conn.call("ping")


def test_the_auth_file_is_reread_when_it_changes(tmp_path: Path) -> None:
    users = standard_auth_file(tmp_path / "users.json")
    with BrokerProcess(tmp_path / "data", auth_file=users) as broker:
        carol = ("carol", "carol-token-0123456789abcdef")
        with broker.connect() as conn:
            conn.send("auth", user=carol[0], token=carol[1])
            assert_closed_with(conn, "UNAUTHORIZED", 1)
        write_auth_file(users, {carol[0]: (carol[1], {"carol.*": ["produce"]})})
        deadline = time.monotonic() + 30
        while True:
            with broker.connect() as conn:
                reply = conn.auth(*carol)
                if reply.ok:
                    break
            assert time.monotonic() < deadline, broker.log_tail()
            time.sleep(0.2)
        with broker.connect() as conn:
            conn.send("auth", user=ROOT[0], token=ROOT[1])  # root is gone from the new file
            assert_closed_with(conn, "UNAUTHORIZED", 1)


def test_a_bad_auth_file_stops_the_broker_at_start(tmp_path: Path) -> None:
    bad = tmp_path / "users.json"
    bad.write_text('{"kittiwake_auth": 1, "users": {"alice": {"token_hash": "md5:abc", "rights": {}}}}')
    with pytest.raises(BrokerDidNotStart) as refused:
        BrokerProcess(tmp_path / "data", auth_file=bad)
    assert refused.value.returncode == 1, refused.value
    log = refused.value.log_tail
    assert "cannot start" in log and "user 'alice': token_hash must look like" in log, log


# ------------------------------------------------------------- clients


def test_the_blocking_client_authenticates_and_again_after_a_broker_restart(secured: BrokerProcess) -> None:
    with kittiwake.Client(secured.client_url(*ALICE), connect_timeout=30) as client:
        client.enqueue("alice.jobs", b"1")
        secured.kill()
        secured.restart()
        client.enqueue("alice.jobs", b"2")  # a fresh connection, authenticated again
        assert [task.data for task in client.lease("alice.jobs", max_tasks=5)] == [b"1", b"2"]
        with pytest.raises(errors.Forbidden):
            client.enqueue("bob.jobs", b"x")
        assert "alice-token" not in repr(client) and "alice-token" not in client.url


def test_the_async_client_authenticates_and_again_after_a_broker_restart(secured: BrokerProcess) -> None:
    async def run() -> None:
        client = kittiwake.AsyncClient(secured.client_url(*ALICE), connect_timeout=30)
        try:
            await client.enqueue("alice.jobs", b"1")
            secured.kill()
            secured.restart()
            await client.enqueue("alice.jobs", b"2")
            assert [task.data for task in await client.lease("alice.jobs", max_tasks=5)] == [b"1", b"2"]
            with pytest.raises(errors.Forbidden):
                await client.lease("bob.jobs")
        finally:
            await client.close()

    asyncio.run(run())


def test_clients_with_a_wrong_token_get_unauthorized_not_retries(secured: BrokerProcess) -> None:
    url = secured.client_url(ALICE[0], "wrong-token-0123456789abcdef")
    # a connect timeout far longer than the test: a retried refusal would hang here
    with kittiwake.Client(url, connect_timeout=600) as client:
        with pytest.raises(errors.Unauthorized, match="refused the credentials of user 'alice'") as caught:
            client.ping()
        assert "wrong-token" not in str(caught.value)

    async def run() -> None:
        client = kittiwake.AsyncClient(url, connect_timeout=600)
        try:
            with pytest.raises(errors.Unauthorized):
                await client.ping()
        finally:
            await client.close()

    asyncio.run(run())


def test_a_client_without_credentials_is_told_what_to_do(secured: BrokerProcess) -> None:
    with kittiwake.Client(secured.client_url(), connect_timeout=600) as client:
        with pytest.raises(errors.Unauthorized, match="needs credentials"):
            client.ping()


# ---------------------------------------------------------- brute force


def test_a_thousand_wrong_tokens_cost_the_broker_nothing_noticeable(secured: BrokerProcess) -> None:
    """Guessing from one address: other clients keep being answered, the broker runs the
    key derivation for a handful of tries only, and logs the address once, then a summary."""
    answered = 0
    failures: list[BaseException] = []
    stop = threading.Event()

    def keep_pinging() -> None:
        nonlocal answered
        try:
            with kittiwake.Client(secured.client_url(*ALICE), timeout=30) as client:
                while not stop.is_set():
                    client.ping()
                    answered += 1
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            failures.append(exc)

    pinger = threading.Thread(target=keep_pinging)
    pinger.start()
    while not answered and not failures:  # authenticated before the guessing starts
        time.sleep(0.01)
    try:
        refused = 0
        for attempt in range(1000):
            with secured.connect() as conn:
                conn.send("auth", user=ROOT[0], token=f"guess-{attempt:06d}-0123456789")
                replies = conn.read_until_closed()
                refused += [reply.error["code"] for reply in replies] in (["UNAUTHORIZED"], ["UNAVAILABLE"])
        answered_during = answered
    finally:
        stop.set()
        pinger.join(60)
    assert not failures, failures
    assert refused == 1000
    assert answered_during > 10, "the authenticated client was not served during the brute force"
    with secured.connect() as conn:  # a token verified before still works from a fresh connection
        assert conn.auth(*ALICE).ok
    with secured.connect() as conn:  # one never verified waits for the address's window to close
        assert conn.auth(*ROOT).error["code"] == "UNAUTHORIZED"
    assert secured.terminate() == 0
    log = secured.log_path.read_text()
    assert len(re.findall(r"authentication failed from 127\.0\.0\.1", log)) == 1, log[-3000:]
    summary = re.search(r"(\d+) more failed authentications from 127\.0\.0\.1 in \d+ s, (\d+) of them refused unchecked", log)
    assert summary is not None, log[-3000:]
    more, unchecked = int(summary.group(1)), int(summary.group(2))
    # 1,001 failures (the guesses and root's last try): all but the window's budget of 10
    # were refused without running scrypt
    assert more == 1000 and unchecked >= 1001 - 10


def test_failed_logins_from_many_addresses_meet_a_budget_for_the_whole_broker(secured: BrokerProcess) -> None:
    """Each address has its budget of key derivations, and all of them together have one more: past
    it, a try that would need a key derivation is refused unchecked (UNAVAILABLE: try again later)
    from any address until the window closes; a token verified before is still accepted."""
    with secured.connect(source="127.0.0.1") as conn:
        assert conn.auth(*ALICE).ok  # verified before the guessing: kept in the cache
    sources = [f"127.0.0.{n}" for n in range(2, 2 + 6)]  # 6 addresses × their 10 = 60 > 30

    def guess(source: str) -> list[str]:
        codes = []
        for attempt in range(10):
            with secured.connect(source=source) as conn:
                conn.send("auth", user=ROOT[0], token=f"guess-{attempt:02d}-from-{source}")
                codes += [reply.error["code"] for reply in conn.read_until_closed()]
        return codes

    with ThreadPoolExecutor(len(sources)) as pool:
        codes = [code for per_source in pool.map(guess, sources) for code in per_source]
    assert set(codes) <= {"UNAUTHORIZED", "UNAVAILABLE"} and len(codes) == 60
    with secured.connect(source="127.0.0.100") as conn:  # an address that never failed
        reply = conn.auth(ROOT[0], "one-more-guess-0123456789")
        assert reply.error["code"] == "UNAVAILABLE" and "failed authentications" in reply.error["message"]
    with secured.connect(source="127.0.0.101") as conn:  # right, but never verified: not checked either
        assert conn.auth(*ROOT).error["code"] == "UNAVAILABLE"
    with secured.connect(source="127.0.0.102") as conn:
        assert conn.auth(*ALICE).ok
    assert secured.terminate() == 0
    log = secured.log_path.read_text()
    assert re.search(r"failed authentications from all addresses in 60 s", log), log[-3000:]


def test_a_new_token_of_the_same_length_is_seen_though_the_files_time_and_size_are_the_same(tmp_path: Path) -> None:
    # the broker compared the file's modification time and size only: a token changed by
    # `kittiwake auth` within one tick of the file system's clock left the old token working
    users = tmp_path / "users.json"
    old, new = ("dave", "dave-token-0123456789abcdef"), ("dave", "dave-token-fedcba9876543210")
    write_auth_file(users, {old[0]: (old[1], {"dave.*": ["all"]})})
    with BrokerProcess(tmp_path / "data", auth_file=users) as broker:
        with broker.connect() as conn:
            assert conn.auth(*old).ok
        before = os.stat(users)
        write_auth_file(users, {new[0]: (new[1], {"dave.*": ["all"]})})  # replaced whole, as the CLI does
        os.utime(users, ns=(before.st_atime_ns, before.st_mtime_ns))
        assert os.stat(users).st_size == before.st_size
        deadline = time.monotonic() + 30
        while True:
            with broker.connect() as conn:
                if conn.auth(*new).ok:
                    break
            assert time.monotonic() < deadline, "the old token still works: the change was not seen"
            time.sleep(0.2)
        with broker.connect() as conn:
            conn.send("auth", user=old[0], token=old[1])
            assert_closed_with(conn, "UNAUTHORIZED", 1)
