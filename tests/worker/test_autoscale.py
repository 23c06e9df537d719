"""Autoscaling: the supervisor adds worker processes under a backlog, runs --scale-cmd when it
wants more than MAX, and retires idle processes back down to MIN."""

from __future__ import annotations

from pathlib import Path

from kittiwake.worker.autoscale import ScalePolicy, parse_range
from kittiwake.worker.registry import live_workers
from support.broker_process import BrokerProcess
from worker import apps
from worker.harness import read_lines, wait_for, workers

TASKS = 24


def test_policy_scales_up_on_growth_and_down_after_idle() -> None:
    policy = ScalePolicy(1, 3, window_secs=1.0, idle_secs=2.0)
    assert policy.decide(0.0, 0, 1).processes == 1
    assert policy.decide(0.5, 5, 1).processes == 2  # more waiting than slots
    assert policy.decide(1.0, 1, 2).processes == 2  # shrinking within its slots
    assert policy.decide(2.1, 1, 2).processes == 3  # not shrinking over a window
    assert policy.decide(2.5, 9, 3).wanted == 4  # beyond MAX: wanted for --scale-cmd, capped here
    assert policy.decide(3.0, 0, 3).processes == 3
    assert policy.decide(5.1, 0, 3).processes == 2  # idle for idle_secs
    assert policy.decide(5.5, 0, 2).processes == 2
    assert policy.decide(7.2, 0, 2).processes == 1
    assert policy.decide(9.5, 0, 1).processes == 1  # never below MIN
    assert parse_range("1:4") == (1, 4)


def test_autoscaling_up_under_a_backlog_and_down_when_idle(broker: BrokerProcess, app, tmp_path: Path) -> None:
    runs, wanted = tmp_path / "runs", tmp_path / "wanted"
    with workers(broker.url, tmp_path, "--queues", "short", "--prefetch", "0", "--autoscale", "1:3",
                 "--scale-window-secs", "1", "--scale-idle-secs", "1.5",
                 "--scale-cmd", f'echo "$KITTIWAKE_DESIRED" >> {wanted}') as worker:
        wait_for(lambda: len(live_workers(app.client)) == 1, message="one worker at first")
        # 24 tasks of 0.4 s: a backlog that outlasts the scale-up to MAX and the call for one more
        handles = [apps.slow.submit(str(runs), f"t{n}", 0.4) for n in range(TASKS)]
        wait_for(lambda: len(live_workers(app.client)) == 3, timeout=30, message="three workers under load")
        assert sorted(app.results(handles, timeout=60)) == sorted(f"t{n}" for n in range(TASKS))
        assert set(wait_for(lambda: read_lines(wanted), message="--scale-cmd beyond MAX")) == {"4"}
        wait_for(lambda: len(live_workers(app.client)) == 1, timeout=30, message="back to one worker when idle")
        assert len(read_lines(runs)) == 2 * TASKS  # every task started and ended once: retiring lost nothing
        # the two retired processes stopped gracefully (each logs it just after leaving the registry)
        wait_for(lambda: worker.log().count(" stopped after ") == 2, timeout=10, message="two graceful stops")
        assert worker.terminate() == 0
