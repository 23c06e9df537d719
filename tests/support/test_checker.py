"""The queue checker on hand-made histories: one test per classification."""

from __future__ import annotations

import threading

import pytest

from support.checker import (
    AFTER_ACK,
    DELIVER,
    DEQUEUE,
    ENQUEUE,
    LEASE_EXPIRED,
    RESTART,
    RESTART_BEFORE_EXPIRY,
    UNEXPLAINED,
    History,
    check,
)


class FakeClock:
    """Time that moves only when a test says so."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, secs: float) -> None:
        self.now += secs


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def history(clock: FakeClock) -> History:
    return History(clock)


def enqueued(history: History, *values: str, process: str = "producer") -> None:
    history.ok(history.invoke(process, ENQUEUE, values))


def delivered(history: History, clock: FakeClock, *values: str, lease_secs: float = 2.0) -> None:
    op = history.invoke("consumer", DELIVER)
    history.ok(op, values, expires_at=clock() + lease_secs)


def acked(history: History, *values: str) -> None:
    history.ok(history.invoke("consumer", DEQUEUE, values))


def test_a_clean_run_is_valid_and_counts_everything(history: History, clock: FakeClock) -> None:
    enqueued(history, "a", "b", "c")
    delivered(history, clock, "a", "b")
    acked(history, "a", "b")
    result = check(history, ["c"])
    assert result.valid
    assert result.counts() == {"lost": 0, "unexpected": 0, "duplicated": 0, "recovered": 0}
    assert (result.attempted, result.acknowledged, result.delivered, result.acked, result.drained) == (3, 3, 2, 2, 1)


def test_an_acknowledged_value_never_delivered_and_not_drained_is_lost(history: History) -> None:
    enqueued(history, "a", "b")
    result = check(history, ["b"])
    assert result.lost == ["a"]
    assert not result.valid


def test_a_value_delivered_but_never_acknowledged_and_gone_is_lost(history: History, clock: FakeClock) -> None:
    enqueued(history, "a")
    delivered(history, clock, "a")
    failed = history.invoke("consumer", DEQUEUE, ["a"])
    history.fail(failed, "TASK_NOT_LEASED")
    result = check(history, [])
    assert result.lost == ["a"]


def test_a_dequeue_of_unknown_outcome_may_have_removed_the_value(history: History, clock: FakeClock) -> None:
    enqueued(history, "a")
    delivered(history, clock, "a")
    history.unknown(history.invoke("consumer", DEQUEUE, ["a"]), "CONNECTION_LOST")
    result = check(history, [])
    assert result.valid
    assert result.dequeue_unknown_absent == 1


def test_a_partly_successful_dequeue_fails_the_other_items(history: History, clock: FakeClock) -> None:
    enqueued(history, "a", "b")
    delivered(history, clock, "a", "b")
    op = history.invoke("consumer", DEQUEUE, ["a", "b"])
    history.ok(op, ["a"])
    result = check(history, [])
    assert result.lost == ["b"]


def test_a_value_delivered_without_any_enqueue_is_unexpected(history: History, clock: FakeClock) -> None:
    enqueued(history, "a")
    delivered(history, clock, "a", "ghost")
    acked(history, "a", "ghost")
    result = check(history, ["phantom"])
    assert result.unexpected == ["ghost", "phantom"]
    assert not result.valid


def test_an_unknown_enqueue_that_never_shows_up_is_not_lost(history: History) -> None:
    history.unknown(history.invoke("producer", ENQUEUE, ["a"]), "CONNECTION_LOST")
    pending = history.invoke("producer", ENQUEUE, ["b"])  # never completed: unknown as well
    result = check(history, [])
    assert result.valid
    assert result.lost == [] and result.recovered == []
    assert result.unknown_absent == 2
    assert pending.status == "invoke"


def test_an_unknown_enqueue_that_shows_up_is_recovered(history: History, clock: FakeClock) -> None:
    history.unknown(history.invoke("producer", ENQUEUE, ["a", "b"]), "CONNECTION_LOST")
    delivered(history, clock, "a")
    acked(history, "a")
    result = check(history, ["b"])
    assert result.valid
    assert result.recovered == ["a", "b"]
    assert result.enqueue_unknown == 2


def test_an_enqueue_retried_after_an_unknown_outcome_counts_as_acknowledged(history: History) -> None:
    history.unknown(history.invoke("producer", ENQUEUE, ["a"]), "CONNECTION_LOST")
    enqueued(history, "a")
    result = check(history, [])
    assert result.lost == ["a"]
    assert result.recovered == []


def test_a_failed_enqueue_that_shows_up_is_reported(history: History) -> None:
    history.fail(history.invoke("producer", ENQUEUE, ["a"]), "UNAVAILABLE")
    history.fail(history.invoke("producer", ENQUEUE, ["b"]), "UNAVAILABLE")
    result = check(history, ["a"])
    assert result.failed_present == ["a"]
    assert result.enqueue_failed == 2
    assert "failed enqueue yet present: 'a'" in result.format()


def test_a_redelivery_after_lease_expiry_is_an_explained_duplicate(history: History, clock: FakeClock) -> None:
    enqueued(history, "a")
    delivered(history, clock, "a", lease_secs=2.0)
    clock.advance(2.5)
    delivered(history, clock, "a")
    acked(history, "a")
    result = check(history, [])
    assert result.valid
    assert result.duplicated == {"a": 2}
    assert result.duplicate_reasons == {LEASE_EXPIRED: 1}
    assert result.unexplained == []


def test_a_redelivery_across_a_broker_crash_is_a_restart_duplicate(history: History, clock: FakeClock) -> None:
    enqueued(history, "a", "b")
    delivered(history, clock, "a", lease_secs=2.0)
    delivered(history, clock, "b", lease_secs=30.0)
    clock.advance(0.1)
    history.crash("SIGKILL")
    clock.advance(2.5)
    delivered(history, clock, "a", "b")
    acked(history, "a", "b")
    result = check(history, [])
    assert result.duplicate_reasons == {RESTART: 1, RESTART_BEFORE_EXPIRY: 1}
    assert result.unexplained == []
    assert "restart=1, restart_before_expiry=1" in result.format()


def test_a_value_still_present_after_a_delivery_is_delivered_once_more(history: History, clock: FakeClock) -> None:
    enqueued(history, "a")
    delivered(history, clock, "a", lease_secs=2.0)
    clock.advance(3.0)
    result = check(history, ["a"])
    assert result.valid
    assert result.duplicated == {"a": 2}
    assert result.duplicate_reasons == {LEASE_EXPIRED: 1}


def test_a_value_present_twice_at_the_end_is_an_unexplained_duplicate(history: History) -> None:
    enqueued(history, "a", "b")
    result = check(history, ["a", "a", "b"])
    assert result.duplicated == {"a": 2}
    assert result.duplicate_reasons == {UNEXPLAINED: 1}
    assert result.unexplained == ["a"]


def test_a_redelivery_after_an_acknowledged_dequeue_is_not_explained(history: History, clock: FakeClock) -> None:
    enqueued(history, "a")
    delivered(history, clock, "a")
    acked(history, "a")
    clock.advance(5.0)
    history.crash()
    delivered(history, clock, "a")
    result = check(history, [])
    assert result.duplicate_reasons == {AFTER_ACK: 1}
    assert result.unexplained == ["a"]


def test_a_redelivery_while_the_lease_runs_and_no_crash_is_not_explained(history: History, clock: FakeClock) -> None:
    enqueued(history, "a")
    delivered(history, clock, "a", lease_secs=30.0)
    clock.advance(1.0)
    delivered(history, clock, "a")
    acked(history, "a")
    result = check(history, [])
    assert result.duplicate_reasons == {UNEXPLAINED: 1}
    assert result.unexplained == ["a"]
    assert result.valid  # duplicates do not make a run invalid; they are reported


def test_an_update_records_both_sides(history: History, clock: FakeClock) -> None:
    enqueued(history, "a")
    delivered(history, clock, "a")
    dequeue = history.invoke("consumer", DEQUEUE, ["a"])
    enqueue = history.invoke("consumer", ENQUEUE, ["a>b"])
    history.ok(dequeue)
    history.ok(enqueue)
    result = check(history, ["a>b"])
    assert result.valid
    assert result.acknowledged == 2 and result.acked == 1 and result.drained == 1


def test_format_always_prints_the_counts(history: History) -> None:
    text = check(history, []).format()
    assert "lost=0 unexpected=0 duplicated=0 recovered=0" in text
    assert "valid" in text


def test_format_shows_a_sample_of_lost_values(history: History) -> None:
    enqueued(history, *(f"v{i:02}" for i in range(25)))
    text = check(history, []).format()
    assert "INVALID" in text
    assert "lost=25" in text
    assert "'v00'" in text and "and 15 more" in text


def test_an_operation_completes_once(history: History) -> None:
    op = history.invoke("producer", ENQUEUE, ["a"])
    history.ok(op)
    with pytest.raises(ValueError):
        history.unknown(op)


def test_unknown_kinds_are_refused(history: History) -> None:
    with pytest.raises(ValueError):
        history.invoke("producer", "publish", ["a"])


def test_the_history_takes_records_from_many_threads() -> None:
    history = History()

    def produce(name: str) -> None:
        for i in range(500):
            op = history.invoke(name, ENQUEUE, [f"{name}-{i}"])
            history.ok(op)

    threads = [threading.Thread(target=produce, args=(f"p{n}",)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len({op.index for op in history.operations}) == 2000
    result = check(history, [f"p{n}-{i}" for n in range(4) for i in range(500)])
    assert result.valid and result.acknowledged == 2000 and result.drained == 2000
