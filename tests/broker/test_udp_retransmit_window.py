"""The retransmit window: a request runs once, its copies get its reply, the bounds hold."""

from __future__ import annotations

from kittiwake.broker.udp.retransmit_window import RetransmitWindow, Seen


def test_a_new_request_runs_and_its_retransmission_gets_the_same_reply() -> None:
    window = RetransmitWindow()
    assert window.lookup((7, 1), now=0.0) is Seen.NEW
    window.begin((7, 1))
    assert window.lookup((7, 1), now=0.1) is Seen.IN_FLIGHT  # a copy while it runs is dropped
    window.finish((7, 1), b"reply-1", now=0.2)
    assert window.lookup((7, 1), now=0.3) == b"reply-1"
    assert window.lookup((7, 1), now=0.4) == b"reply-1"
    assert window.hits == 2


def test_senders_do_not_share_request_ids() -> None:
    window = RetransmitWindow()
    window.begin((1, 5))
    window.finish((1, 5), b"one", now=0.0)
    assert window.lookup((2, 5), now=0.0) is Seen.NEW
    alice, bob = ("alice", ("10.0.0.1", 4000), 1), ("bob", ("10.0.0.2", 4000), 1)  # one producer id, two senders
    window.begin((alice, 6))
    assert window.lookup((bob, 6), now=0.0) is Seen.NEW
    window.finish((alice, 6), b"alice's", now=0.0)
    assert window.lookup((bob, 6), now=0.0) is Seen.NEW


def test_entries_older_than_the_age_are_forgotten_and_their_ids_refused() -> None:
    window = RetransmitWindow(max_age_secs=30.0)
    window.begin((1, 1))
    window.finish((1, 1), b"r", now=0.0)
    assert window.lookup((1, 1), now=29.0) == b"r"
    assert window.lookup((1, 1), now=31.0) is Seen.TOO_LATE  # it ran, its reply is gone: outcome unknown
    assert len(window) == 0
    assert window.lookup((1, 2), now=31.0) is Seen.NEW  # later ids of the producer are new


def test_the_count_bound_evicts_the_oldest_first() -> None:
    window = RetransmitWindow(max_entries=3)
    for request_id in range(1, 6):
        window.begin((9, request_id))
        window.finish((9, request_id), f"r{request_id}".encode(), now=float(request_id))
    assert len(window) == 3
    assert window.lookup((9, 2), now=6.0) is Seen.TOO_LATE
    assert window.lookup((9, 3), now=6.0) == b"r3"
    assert window.evicted == 2


def test_requests_in_flight_are_not_evicted_by_the_count() -> None:
    window = RetransmitWindow(max_entries=1)
    window.begin((1, 1))  # a parked long-poll, say
    for request_id in range(2, 5):
        window.begin((1, request_id))
        window.finish((1, request_id), b"r", now=0.0)
    assert window.lookup((1, 1), now=0.0) is Seen.IN_FLIGHT
    window.abandon((1, 1))
    assert window.lookup((1, 1), now=0.0) is Seen.TOO_LATE  # below an evicted id of the producer


def test_the_senders_remembered_are_bounded() -> None:
    window = RetransmitWindow(max_entries=1, max_senders=2)
    for producer in range(1, 5):
        window.begin((producer, 1))
        window.finish((producer, 1), b"r", now=0.0)
    assert window.lookup((1, 1), now=0.0) is Seen.NEW  # forgotten entirely
    assert window.lookup((3, 1), now=0.0) is Seen.TOO_LATE


def test_a_request_is_found_by_its_place_whichever_sender_began_it() -> None:
    """The listener looks a copy up by (address, producer id) when the sender's session, and so its
    user, is gone: a reply cached there is found, and a request still running there too."""
    window = RetransmitWindow(max_entries=2)
    place = (("10.0.0.1", 4000), 7)
    alice = ("alice", *place)
    window.begin((alice, 1), place)
    assert window.lookup_at(place, 1, now=0.0) is Seen.IN_FLIGHT
    window.finish((alice, 1), b"alice's", now=0.0)
    assert window.lookup_at(place, 1, now=1.0) == b"alice's"
    assert window.lookup_at(place, 2, now=1.0) is Seen.NEW
    assert window.lookup_at((("10.0.0.2", 4000), 7), 1, now=1.0) is Seen.NEW  # another address: nothing
    for request_id in (2, 3):  # the count bound evicts request 1: its place forgets it too
        window.begin((alice, request_id), place)
        window.finish((alice, request_id), b"r", now=2.0)
    assert window.lookup_at(place, 1, now=2.0) is Seen.NEW  # unknown there: the listener checks the session
    assert window.lookup((alice, 1), now=2.0) is Seen.TOO_LATE  # as the sender, it is refused
    assert window.lookup_at(place, 2, now=2.0) == b"r"
    assert window.lookup_at(place, 2, now=40.0) is Seen.NEW  # aged out
