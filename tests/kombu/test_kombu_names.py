"""How kombu's names become Kittiwake's (`kittiwake.kombu.names`) and how options are read (`options`):
pure functions, no broker."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kittiwake.kombu.names import PidClock, broker_url, kombu_name, priority_rank, queue_name
from kittiwake.kombu.options import TransportOptions
from kittiwake.model import Limits, validate_queue


def test_plain_names_pass_unchanged() -> None:
    for name in ("celery", "w1@host.celery.pidbox", "celeryev.1b2c-3d", "a/b_c-d"):
        assert queue_name(name) == name


def test_odd_characters_are_escaped_and_the_group_prefixed() -> None:
    assert queue_name("a b") == "a:20b"
    assert queue_name("x:y") == "x:3Ay"
    assert queue_name("q#1", "app") == "app#q:231"


@given(st.text(min_size=1, max_size=40), st.sampled_from([None, "app", "g.1"]))
def test_queue_names_round_trip_and_are_valid(name: str, group: str | None) -> None:
    mapped = queue_name(name, group)
    assert kombu_name(mapped, group) == name
    validate_queue(mapped, Limits(max_queue_name_bytes=10_000))


def test_priority_ranks() -> None:
    assert [priority_rank(p) for p in (9, 5, 0)] == [0, 4, 9]  # AMQP: 9 first
    assert [priority_rank(p, highest_first=False) for p in (0, 5, 9)] == [0, 5, 9]
    assert priority_rank(None) == priority_rank("junk") == priority_rank(0) == 9
    assert priority_rank(200) == 0 and priority_rank(-3) == 9


def test_pids_sort_by_rank_then_publish_order_and_never_repeat() -> None:
    clock = PidClock()
    pids = [clock.pid(rank, "tag") for rank in (3, 3, 0, 3)]
    assert len(set(pids)) == 4
    assert sorted(pids) == [pids[2], pids[0], pids[1], pids[3]]


def test_broker_url_takes_transport_options_from_the_query() -> None:
    assert broker_url("kittiwake://127.0.0.1:7370") == ("kw://127.0.0.1:7370", {})
    assert broker_url("kittiwake://u:t@h:1//?lease_secs=5&queue_group=app") == (
        "kw://u:t@h:1", {"lease_secs": "5", "queue_group": "app"}
    )
    assert broker_url("kittiwakes://h:1?ca=/ca.pem&wait_secs=2") == ("kws://h:1?ca=%2Fca.pem", {"wait_secs": "2"})


def test_options_convert_strings_and_accept_visibility_timeout() -> None:
    options = TransportOptions.from_mapping(
        {"lease_secs": "5", "requeue_counts_attempt": "false", "max_attempts": "3", "unknown": 1}
    )
    assert (options.lease_secs, options.requeue_counts_attempt, options.max_attempts) == (5.0, False, 3)
    assert options.renew_interval_secs == pytest.approx(5 / 3)
    assert TransportOptions.from_mapping({"visibility_timeout": 1800}).lease_secs == 1800.0
    with pytest.raises(ValueError):
        TransportOptions.from_mapping({"priority_order": "desc"})
