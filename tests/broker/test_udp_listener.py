"""The broker's UDP port: round trips, the retransmit window per sender, the bound on replies, bad datagrams, auth.

Every test talks to a real broker subprocess started with `--udp-port 0`,
with raw datagrams where the client would never send what the test needs.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path
from typing import Any, Iterator

import msgspec
import pytest

from kittiwake import errors
from kittiwake.client import Client
from kittiwake.protocol import decode_reply, encode_request
from kittiwake.protocol.datagrams import MAX_DATAGRAM_BYTES, PADDED_REQUEST_BYTES, decode_datagram, encode_datagram
from support.auth_users import ALICE, BOB, ROOT, standard_auth_file
from support.broker_process import BrokerProcess
from support.udp_faults import flood_sessions

REPLY_WAIT_SECS = 5.0


@pytest.fixture
def udp_broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path / "data", extra_args=["--udp-port", "0"])
    try:
        yield process
    finally:
        process.kill()


class RawUdp:
    """A UDP socket to the broker's port that sends whatever it is given."""

    def __init__(self, broker: BrokerProcess, source: str | None = None) -> None:
        assert broker.udp_port is not None
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        if source is not None:
            self.sock.bind((source, 0))  # any of 127.0.0.0/8: another source address
        self.sock.connect((broker.host, broker.udp_port))
        self.sock.settimeout(REPLY_WAIT_SECS)

    def send(self, data: bytes) -> None:
        self.sock.send(data)

    def request(
        self, producer_id: int, op: str, request_id: int, fields: dict[str, Any], *, pad: bool = False
    ) -> bytes:
        """Send one request; `pad` pads it as the kwu:// client pads reads, for a full datagram back."""
        body = encode_request(op, request_id, fields)
        datagram = encode_datagram(producer_id, body, padded_to=PADDED_REQUEST_BYTES if pad else 0)
        self.send(datagram)
        return datagram

    def reply(self, timeout: float = REPLY_WAIT_SECS) -> Any:
        self.sock.settimeout(timeout)
        data = self.sock.recv(65_535)
        datagram = decode_datagram(data)
        return datagram.producer_id, decode_reply(datagram.body), data

    def replies(self, timeout: float = 0.3) -> list[bytes]:
        """Every datagram that comes back within `timeout` of the last one."""
        self.sock.settimeout(timeout)
        got: list[bytes] = []
        try:
            while True:
                got.append(self.sock.recv(65_535))
        except socket.timeout:
            return got

    def no_reply(self, timeout: float = 0.3) -> bool:
        self.sock.settimeout(timeout)
        try:
            self.sock.recv(65_535)
        except socket.timeout:
            return True
        return False

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def raw(udp_broker: BrokerProcess) -> Iterator[RawUdp]:
    connection = RawUdp(udp_broker)
    yield connection
    connection.close()


def task(queue: str, data: bytes) -> dict[str, Any]:
    return {"queue": queue, "data": data}


def serves_tcp(broker: BrokerProcess) -> bool:
    assert broker.alive()
    with Client(broker.url, timeout=10) as client:
        return "now" in client.ping()


# ------------------------------------------------------------------ round trips


def test_a_ping_and_an_enqueue_come_back_with_their_ids(raw: RawUdp, udp_broker: BrokerProcess) -> None:
    raw.request(41, "ping", 1, {})
    producer, reply, _ = raw.reply()
    assert (producer, reply.id, reply.ok) == (41, 1, True)
    raw.request(41, "enqueue", 2, {"tasks": [task("udp.q", b"hello")]})
    producer, reply, _ = raw.reply()
    assert reply.ok and reply.id == 2 and reply.result[0]["queue"] == "udp.q"
    with Client(udp_broker.url) as tcp:
        assert [t.data for t in tcp.peek("udp.q")] == [b"hello"]


def test_a_retransmitted_enqueue_runs_once_and_gets_the_same_reply(raw: RawUdp, udp_broker: BrokerProcess) -> None:
    datagram = raw.request(7, "enqueue", 1, {"tasks": [task("udp.once", b"x")]})
    _, first, first_bytes = raw.reply()
    assert first.ok
    for _ in range(3):  # the reply was lost, say: the client sends the same datagram again
        raw.send(datagram)
        _, again, again_bytes = raw.reply()
        assert again_bytes == first_bytes
    with Client(udp_broker.url) as tcp:  # seen from TCP: one task, not four
        assert len(tcp.peek("udp.once", n=10)) == 1


def test_copies_of_a_request_in_flight_make_one_task(raw: RawUdp, udp_broker: BrokerProcess) -> None:
    datagram = raw.request(8, "enqueue", 1, {"tasks": [task("udp.burst", b"x")]})
    for _ in range(20):
        raw.send(datagram)
    replies = [raw.reply()[1]]
    try:
        while True:
            replies.append(raw.reply(timeout=0.5)[1])
    except socket.timeout:
        pass
    # copies that came while it ran were dropped; those after it, answered from the window
    assert 1 <= len(replies) <= 21 and all(reply.ok for reply in replies)
    assert len({tuple(reply.result[0].items()) for reply in replies}) == 1
    with Client(udp_broker.url) as tcp:
        assert len(tcp.peek("udp.burst", n=10)) == 1


def test_the_same_request_id_of_another_producer_is_another_request(raw: RawUdp, udp_broker: BrokerProcess) -> None:
    raw.request(1, "enqueue", 5, {"tasks": [task("udp.two", b"a")]})
    assert raw.reply()[1].ok
    raw.request(2, "enqueue", 5, {"tasks": [task("udp.two", b"b")]})  # a guessed or spoofed producer id
    assert raw.reply()[1].ok
    with Client(udp_broker.url) as tcp:
        assert sorted(t.data for t in tcp.peek("udp.two")) == [b"a", b"b"]


def test_a_lease_reply_fits_in_one_datagram(raw: RawUdp, udp_broker: BrokerProcess) -> None:
    with Client(udp_broker.url) as tcp:
        tcp.enqueue_many([{"queue": "udp.lease", "data": bytes(200)} for _ in range(50)])
    raw.request(3, "lease", 1, {"queues": ["udp.lease"], "max_tasks": 50}, pad=True)
    _, reply, data = raw.reply()
    assert reply.ok and 1 < len(reply.result) < 50
    assert len(data) <= MAX_DATAGRAM_BYTES


def test_a_lease_passes_over_a_task_too_large_for_a_datagram_and_says_so(
    raw: RawUdp, udp_broker: BrokerProcess
) -> None:
    """The task that cannot fit is not leased (no attempt, no delivery): TCP gets it; the others come back."""
    tasks = [("1", b"small 1"), ("2", bytes(5000)), ("3", b"small 3"), ("4", b"small 4")]
    with Client(udp_broker.url) as tcp:
        tcp.enqueue_many([{"queue": "udp.mixed", "data": data, "pid": pid} for pid, data in tasks])
    raw.request(3, "lease", 1, {"queues": ["udp.mixed"], "max_tasks": 10, "lease_secs": 60}, pad=True)
    _, reply, data = raw.reply()
    assert reply.ok and [task["pid"] for task in reply.result] == ["1", "3", "4"]
    assert msgspec.msgpack.decode(decode_datagram(data).body)["too_large"] == 1
    with Client(udp_broker.url) as tcp:
        huge = tcp.get("udp.mixed", "2")
        assert (huge.state, huge.attempts, huge.deliveries) == ("available", 0, 0)
        assert [task.pid for task in tcp.lease("udp.mixed", max_tasks=10)] == ["2"]


# ------------------------------------------------- the window belongs to one sender


def test_the_same_producer_and_request_id_from_another_address_is_another_request(udp_broker: BrokerProcess) -> None:
    first, second = RawUdp(udp_broker), RawUdp(udp_broker, source="127.0.0.2")
    try:
        first.request(77, "enqueue", 5, {"tasks": [task("udp.senders", b"first")]})
        _, mine, _ = first.reply()
        second.request(77, "enqueue", 5, {"tasks": [task("udp.senders", b"second")]})  # a guessed producer id
        _, theirs, _ = second.reply()
    finally:
        first.close()
        second.close()
    assert mine.ok and theirs.ok and mine.result[0]["pid"] != theirs.result[0]["pid"]
    with Client(udp_broker.url) as tcp:
        assert sorted(t.data for t in tcp.peek("udp.senders")) == [b"first", b"second"]


def test_another_user_reads_no_cached_reply_and_uses_up_no_request_id(tmp_path: Path) -> None:
    """Bob knows alice's producer id and guesses her next request ids: he gets nothing of hers,
    and her next enqueue runs rather than being answered with what bob's request got."""
    users = standard_auth_file(tmp_path / "users.json")
    broker = BrokerProcess(tmp_path / "data", extra_args=["--udp-port", "0"], auth_file=users)
    bob = RawUdp(broker)
    try:
        with Client(broker.client_url(*ROOT)) as root:
            root.enqueue("alice.secret", b"alice's task data")
        alice_url = f"kwu://{ALICE[0]}:{ALICE[1]}@{broker.host}:{broker.udp_port}"
        with Client(alice_url, timeout=10) as alice:
            [leased] = alice.lease("alice.secret", lease_secs=60)  # request 1 is her auth, this is 2
            assert leased.data == b"alice's task data"
            producer_id = alice._channel.producer_id  # type: ignore[attr-defined]
            bob.request(producer_id, "auth", 1, {"user": BOB[0], "token": BOB[1]})
            assert bob.reply()[1].ok
            bob.request(producer_id, "lease", 2, {"queues": ["bob.q"], "lease_secs": 60})
            _, reply, data = bob.reply()
            assert b"alice's task data" not in data and reply.ok and reply.result == []
            for request_id in range(3, 13):  # her next ids, taken first
                bob.request(producer_id, "enqueue", request_id, {"tasks": [task("bob.q", b"bob's")]})
                assert bob.reply()[1].ok
            outcome = alice.enqueue("alice.jobs", b"alice's enqueue")  # her request 3
            assert outcome.queue == "alice.jobs"
        with Client(broker.client_url(*ROOT)) as root:
            assert [t.data for t in root.peek("alice.jobs")] == [b"alice's enqueue"]
            assert len(root.peek("bob.q", n=100)) == 10
    finally:
        bob.close()
        broker.kill()


# ------------------------------------------------------------ reflection


def _ratio(sent: bytes, replies: list[bytes]) -> float:
    return max((len(reply) / len(sent) for reply in replies), default=0.0)


@pytest.mark.parametrize("with_auth", [False, True], ids=["no-auth", "auth"])
def test_no_reply_is_more_than_three_times_its_request(tmp_path: Path, with_auth: bool) -> None:
    """QUIC's bound for an unverified address (RFC 9000 §8): a forged source gets back at most
    three times what was sent in its name. Without an auth file no source is verified; with one,
    neither is a source without a session — nor, as an auth datagram's source is only claimed too,
    one with a session: the bound is the same for every reply."""
    users = standard_auth_file(tmp_path / "users.json") if with_auth else None
    broker = BrokerProcess(tmp_path / "data", extra_args=["--udp-port", "0"], auth_file=users)
    raw = RawUdp(broker)
    try:
        with Client(broker.client_url(*ROOT) if with_auth else broker.url) as tcp:
            tcp.enqueue_many([{"queue": "amp.q", "data": bytes(300), "sender": "s"} for _ in range(20)])
            pid = tcp.peek("amp.q")[0].pid
        worst = [
            ("peek", {"queue": "amp.q", "n": 100}),
            ("lease", {"queues": ["amp.q"], "max_tasks": 100}),
            ("stats", {}),
            ("list_queues", {}),
            ("get", {"queue": "amp.q", "pid": pid}),
            ("find_by_sender", {"sender": "s"}),
            ("ping", {}),
            ("no_such_op", {}),
            ("auth", {"user": "", "token": ""}),
            ("auth", {"user": ROOT[0], "token": "wrong"}),
        ]
        ratios: dict[str, float] = {}
        phases = ["unauthenticated", "authenticated"] if with_auth else ["no auth"]
        for phase in phases:
            if phase == "authenticated":
                raw.request(5, "auth", 100, {"user": ROOT[0], "token": ROOT[1]})
                assert raw.reply()[1].ok
            for n, (op, fields) in enumerate(worst, 1):
                sent = raw.request(5, op, n, fields)
                ratios[f"{phase} {op}"] = _ratio(sent, raw.replies())
            for body in (b"\xc1", b"", b"\x80", b"\x81\xa2id\x01"):  # bodies that do not decode
                sent = encode_datagram(5, body)
                raw.send(sent)
                ratios[f"{phase} {body!r}"] = _ratio(sent, raw.replies())
        assert max(ratios.values()) <= 3.0, ratios
    finally:
        raw.close()
        broker.kill()


def test_a_read_too_large_for_its_request_is_told_to_pad_or_use_tcp(raw: RawUdp, udp_broker: BrokerProcess) -> None:
    with Client(udp_broker.url) as tcp:
        tcp.enqueue_many([{"queue": "udp.read", "data": bytes(200)} for _ in range(3)])
    raw.request(5, "peek", 1, {"queue": "udp.read", "n": 3})
    _, reply, _ = raw.reply()
    assert (reply.id, reply.error["code"]) == (1, "FRAME_TOO_LARGE") and "kw://" in reply.error["message"]
    raw.request(5, "peek", 2, {"queue": "udp.read", "n": 3}, pad=True)  # room for a full datagram back
    _, reply, _ = raw.reply()
    assert reply.ok and len(reply.result) == 3


# ---------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\x00",
        b"garbage that is not a datagram of ours",
        b"KWU\x01\x00\x00\x00",  # a truncated header
        b"KWU\x09" + bytes(8) + b"\x80",  # another version
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + bytes(100),  # a TLS ClientHello
    ],
)
def test_bytes_that_are_not_our_datagrams_are_dropped(raw: RawUdp, udp_broker: BrokerProcess, data: bytes) -> None:
    raw.send(data)
    assert raw.no_reply()
    assert serves_tcp(udp_broker)


@pytest.mark.parametrize(
    "body, code",
    [
        (b"\xc1", "MALFORMED_FRAME"),  # never-used msgpack byte
        (b"", "MALFORMED_FRAME"),
        (msgspec.msgpack.encode({"id": 4, "op": "no_such_op"}), "UNKNOWN_OP"),
        (msgspec.msgpack.encode({"id": 4, "op": "enqueue", "tasks": "not a list"}), "BAD_REQUEST"),
        (msgspec.msgpack.encode({"id": 4, "op": "enqueue"})[:-3], "MALFORMED_FRAME"),  # truncated
    ],
)
def test_a_body_that_does_not_decode_gets_an_error_reply(
    raw: RawUdp, udp_broker: BrokerProcess, body: bytes, code: str
) -> None:
    raw.send(encode_datagram(99, body, padded_to=64))  # room for the error: three times 64 bytes
    producer, reply, data = raw.reply()
    assert producer == 99 and not reply.ok
    assert reply.error["code"] == code and len(data) <= 3 * 64
    assert serves_tcp(udp_broker)


@pytest.mark.parametrize("body", [b"\xc1", b"", b"\x80"])
def test_a_datagram_too_small_for_even_an_error_gets_nothing(
    raw: RawUdp, udp_broker: BrokerProcess, body: bytes
) -> None:
    """An error reply is some 60 bytes at least: more than three times a datagram of 15."""
    raw.send(encode_datagram(99, body))
    assert raw.no_reply()
    assert serves_tcp(udp_broker)


def test_an_oversize_datagram_gets_frame_too_large(raw: RawUdp, udp_broker: BrokerProcess) -> None:
    raw.request(5, "enqueue", 9, {"tasks": [task("udp.over", bytes(3000))]})
    _, reply, _ = raw.reply()
    assert (reply.id, reply.ok, reply.error["code"]) == (9, False, "FRAME_TOO_LARGE")
    raw.send(encode_datagram(5, bytes(60_000)))  # near the largest UDP payload, and not even msgpack
    _, reply, _ = raw.reply()
    assert not reply.ok
    with Client(udp_broker.url) as tcp:
        assert tcp.peek("udp.over") == []
    assert serves_tcp(udp_broker)


def test_thousands_of_random_datagrams_do_not_stop_the_broker(raw: RawUdp, udp_broker: BrokerProcess) -> None:
    rng = random.Random(20261124)
    valid = [
        encode_request("enqueue", 1, {"tasks": [task("fuzz.q", b"data")]}),
        encode_request("lease", 2, {"queues": ["fuzz.q"], "max_tasks": 3}),
        encode_request("dequeue", 3, {"leases": [{"queue": "fuzz.q", "pid": "p", "lease_id": 1}]}),
        encode_request("stats", 4, {"queues": ["fuzz.q"]}),
    ]
    for _ in range(3000):
        kind = rng.random()
        if kind < 0.3:
            data = rng.randbytes(rng.randrange(0, 200))
        elif kind < 0.6:
            data = encode_datagram(rng.getrandbits(64), rng.randbytes(rng.randrange(0, 300)))
        else:
            body = bytearray(rng.choice(valid))
            for _ in range(rng.randrange(1, 4)):
                body[rng.randrange(len(body))] = rng.randrange(256)
            data = encode_datagram(rng.getrandbits(64), bytes(body))
        raw.send(data)
    raw.sock.settimeout(0.2)
    try:
        while True:
            raw.sock.recv(65_535)  # the error replies, as many as came back
    except socket.timeout:
        pass
    assert serves_tcp(udp_broker)
    raw.request(12345, "ping", 1, {})
    assert raw.reply()[1].ok


# --------------------------------------------------------------------- auth


def test_with_an_auth_file_a_producer_authenticates_once_and_is_authorised(tmp_path: Path) -> None:
    users = standard_auth_file(tmp_path / "users.json")
    broker = BrokerProcess(tmp_path / "data", extra_args=["--udp-port", "0"], auth_file=users)
    try:
        raw = RawUdp(broker)
        raw.request(1, "enqueue", 1, {"tasks": [task("alice.q", b"x")]})
        _, reply, _ = raw.reply()
        assert reply.error["code"] == "UNAUTHORIZED"
        raw.request(1, "auth", 2, {"user": ALICE[0], "token": "wrong"})
        assert raw.reply()[1].error["code"] == "UNAUTHORIZED"
        raw.close()
        user, token = ALICE
        with Client(f"kwu://{user}:{token}@{broker.host}:{broker.udp_port}") as alice:
            assert alice.enqueue("alice.q", b"x").queue == "alice.q"
            with pytest.raises(errors.Forbidden):
                alice.enqueue("bob.q", b"x")
        with Client(f"kwu://{broker.host}:{broker.udp_port}") as anonymous:
            with pytest.raises(errors.Unauthorized):
                anonymous.ping()
    finally:
        broker.kill()


def test_failed_udp_auths_do_not_lock_a_tcp_address_out(tmp_path: Path) -> None:
    """A UDP source address is only claimed: failures of `auth` datagrams count in a budget of
    their own, so forged ones from an address, or from many, refuse no TCP login."""
    users = standard_auth_file(tmp_path / "users.json")
    broker = BrokerProcess(tmp_path / "data", extra_args=["--udp-port", "0"], auth_file=users)
    try:
        for source in ["127.0.0.1", *(f"127.0.0.{n}" for n in range(2, 6))]:  # 5 × 12 tries, past every UDP budget
            raw = RawUdp(broker, source=source)
            try:
                for attempt in range(12):
                    raw.request(9, "auth", attempt + 1, {"user": ROOT[0], "token": f"forged-{attempt:02d}-0123456789"})
                    assert raw.reply()[1].error["code"] in ("UNAUTHORIZED", "UNAVAILABLE")
            finally:
                raw.close()
        with broker.connect(source="127.0.0.1") as conn:  # never verified before: checked now
            assert conn.auth(*ROOT).ok
        with broker.connect(source="127.0.0.3") as conn:
            assert conn.auth(*BOB).ok
    finally:
        broker.kill()


# ------------------------------------------------------------------ restarts


def test_a_retransmission_after_a_restart_runs_again_so_named_pids_keep_it_single(udp_broker: BrokerProcess) -> None:
    """The window is in memory (see `broker.retransmit_window`): after a restart a retransmitted
    enqueue runs again. With a pid it collapses into the task it made; without one it makes a second."""
    raw = RawUdp(udp_broker)
    named = raw.request(21, "enqueue", 1, {"tasks": [{"queue": "udp.restart", "data": b"n", "pid": "named"}]})
    assert raw.reply()[1].ok
    fifo = raw.request(21, "enqueue", 2, {"tasks": [task("udp.restart", b"f")]})
    assert raw.reply()[1].ok
    raw.close()
    udp_broker.restart()
    raw = RawUdp(udp_broker)
    try:
        raw.send(named)
        reply = raw.reply()[1]
        assert reply.ok and reply.result[0]["collapsed"] is True
        raw.send(fifo)
        assert raw.reply()[1].ok
    finally:
        raw.close()
    with Client(udp_broker.url) as tcp:
        assert sorted(t.data for t in tcp.peek("udp.restart", n=10)) == [b"f", b"f", b"n"]


def test_long_polls_of_one_address_are_bounded_the_rest_are_served_at_once(raw: RawUdp,
                                                                         udp_broker: BrokerProcess) -> None:
    # a lease datagram with a long wait held ~1.2 KB in the broker for its whole wait, with no bound:
    # 100,000 tiny datagrams grew it by 120 MB. Beyond MAX_WAITS_PER_HOST (8) a lease is served at once
    from kittiwake.broker.udp.listener import MAX_WAITS_PER_HOST

    count = MAX_WAITS_PER_HOST + 12
    for request_id in range(1, count + 1):
        raw.request(7, "lease", request_id, {"queues": ["waits"], "wait_secs": 30.0}, pad=True)
    answered = [decode_reply(decode_datagram(data).body) for data in raw.replies(timeout=1.0)]
    assert len(answered) == count - MAX_WAITS_PER_HOST and all(reply.ok and reply.result == [] for reply in answered)
    with Client(udp_broker.url) as client:
        client.enqueue("waits", b"for a parked one")
    _, woken, _ = raw.reply()
    assert woken.ok and [task["data"] for task in woken.result] == [b"for a parked one"]


# ------------------------------------------------------------------ sessions


@pytest.mark.parametrize("sources", [1, 40], ids=["one-address", "many-addresses"])
def test_a_user_flooding_sessions_pushes_out_only_its_own(tmp_path: Path, sources: int) -> None:
    """Any valid credentials made sessions in one table of 10,000, least recently used out first:
    10,001 `auth`s of bob with new producer ids pushed out every other user's session, from one
    address or from many. Now a user over its cap (or an address over its own) loses its own
    oldest sessions, and alice keeps hers."""
    from kittiwake.broker.udp.listener import MAX_SESSIONS

    users = standard_auth_file(tmp_path / "users.json")
    broker = BrokerProcess(tmp_path / "data", extra_args=["--udp-port", "0"], auth_file=users)
    alice = RawUdp(broker)
    try:
        alice.request(5, "auth", 1, {"user": ALICE[0], "token": ALICE[1]}, pad=True)
        assert alice.reply()[1].ok
        hosts = ["127.0.0.1"] if sources == 1 else [f"127.0.0.{n}" for n in range(2, 2 + sources)]
        assert flood_sessions((broker.host, broker.udp_port), BOB, MAX_SESSIONS + 1, hosts) > 0
        alice.request(5, "enqueue", 2, {"tasks": [task("alice.q", b"still in")]})
        _, reply, _ = alice.reply()
        assert reply.ok, reply.error
    finally:
        alice.close()
        broker.kill()


def test_a_retransmission_is_answered_from_the_window_when_its_session_is_gone(tmp_path: Path) -> None:
    """The session was looked at before the window: a retransmitted enqueue whose producer's session
    was pushed out meanwhile got UNAUTHORIZED although its reply was cached, and the client, told
    to authenticate again, sent it once more under a new id — two tasks. The cached reply now goes
    back, to the address it was cached for only."""
    from kittiwake.broker.udp.listener import MAX_SESSIONS

    users = standard_auth_file(tmp_path / "users.json")
    broker = BrokerProcess(tmp_path / "data", extra_args=["--udp-port", "0"], auth_file=users)
    alice, elsewhere = RawUdp(broker), RawUdp(broker, source="127.0.0.2")
    try:
        alice.request(9, "auth", 1, {"user": ALICE[0], "token": ALICE[1]}, pad=True)
        assert alice.reply()[1].ok
        datagram = alice.request(9, "enqueue", 2, {"tasks": [task("alice.once", b"x")]})
        _, first, first_bytes = alice.reply()  # say it was lost on its way back
        assert first.ok
        flood_sessions((broker.host, broker.udp_port), ALICE, MAX_SESSIONS + 1, ["127.0.0.1"])  # alice's own churn: hers go too
        elsewhere.send(datagram)  # the same bytes from another address: not this sender's window
        _, theirs, their_bytes = elsewhere.reply()
        assert theirs.error["code"] == "UNAUTHORIZED" and their_bytes != first_bytes
        alice.send(datagram)  # the retransmission
        _, again, again_bytes = alice.reply()
        assert again_bytes == first_bytes
        alice.request(9, "enqueue", 3, {"tasks": [task("alice.once", b"y")]})  # the session is gone indeed
        assert alice.reply()[1].error["code"] == "UNAUTHORIZED"
        with Client(broker.client_url(*ROOT)) as root:
            assert [t.data for t in root.peek("alice.once", n=10)] == [b"x"]
    finally:
        alice.close()
        elsewhere.close()
        broker.kill()
