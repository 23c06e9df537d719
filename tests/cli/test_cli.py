"""The `kittiwake` command line, run as a subprocess against a real broker."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from typing import Any

import pytest

from kittiwake import Client
from support.broker_process import BrokerProcess

COMMANDS = ["enqueue", "lease", "dequeue", "release", "peek", "get", "queues", "stats", "delete-queue", "ping"]


def kittiwake(*args: str, url: str | None = None, stdin: str | bytes | None = None,
              env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run `python -m kittiwake ARGS`; text output, never raises on a non-zero exit."""
    command = [sys.executable, "-m", "kittiwake", *(("--url", url) if url else ()), *args]
    data = stdin.encode() if isinstance(stdin, str) else stdin
    environment = {name: value for name, value in os.environ.items() if name != "KITTIWAKE_URL"}
    environment.update(env or {})
    done = subprocess.run(command, input=data if data is not None else b"", capture_output=True, timeout=60,
                          env=environment)
    return subprocess.CompletedProcess(done.args, done.returncode, done.stdout.decode(), done.stderr.decode())


def ok(*args: str, url: str, stdin: str | bytes | None = None) -> str:
    done = kittiwake(*args, url=url, stdin=stdin)
    assert done.returncode == 0, f"kittiwake {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def ok_json(*args: str, url: str, stdin: str | bytes | None = None) -> Any:
    return json.loads(ok("--json", *args, url=url, stdin=stdin))


# ----------------------------------------------------------------- tasks


def test_enqueue_lease_dequeue_round_trip(broker: BrokerProcess) -> None:
    url = broker.url
    assert re.match(r"enqueued jobs \d{17}\n", ok("enqueue", "jobs", "hello world", url=url))
    [task] = ok_json("lease", "jobs", url=url)
    assert (task["queue"], task["data"], task["data_encoding"]) == ("jobs", "hello world", "utf-8")
    assert isinstance(task["lease_id"], int) and task["expires_at"] > task["leased_at"]
    assert ok("dequeue", "jobs", task["pid"], str(task["lease_id"]), url=url) == f"dequeued jobs {task['pid']}\n"
    assert ok_json("peek", "jobs", url=url) == []


def test_the_lease_table_shows_ids_that_dequeue_accepts(broker: BrokerProcess) -> None:
    url = broker.url
    ok("enqueue", "jobs", "one", "--pid", "p-1", url=url)
    table = ok("lease", "jobs", "--lease-secs", "60", url=url)
    row = next(line for line in table.splitlines() if "p-1" in line)
    lease_id = re.search(r"\b(\d{10,})\b", row).group(1)  # type: ignore[union-attr]
    assert "one" in row
    assert ok("dequeue", "jobs", "p-1", lease_id, url=url).startswith("dequeued")


def test_enqueue_options_and_collapse(broker: BrokerProcess) -> None:
    url = broker.url
    [outcome] = ok_json("enqueue", "jobs", "x", "--pid", "a", "--sender", "alice", "--receiver", "bob",
                        "--header", "trace=t1", "--header", "kind=demo", "--max-attempts", "3", url=url)
    assert outcome == {"queue": "jobs", "pid": "a", "collapsed": False}
    assert ok("enqueue", "jobs", "y", "--pid", "a", url=url) == "collapsed into existing task jobs a\n"
    task = ok_json("get", "jobs", "a", url=url)
    assert (task["data"], task["sender"], task["receiver"]) == ("x", "alice", "bob")
    assert task["headers"] == {"trace": "t1", "kind": "demo"}
    assert ok_json("lease", "jobs", url=url) == []  # directed at bob
    assert [t["pid"] for t in ok_json("lease", "jobs", "--receiver", "bob", url=url)] == ["a"]


def test_enqueue_from_stdin_one_task_per_line(broker: BrokerProcess) -> None:
    url = broker.url
    outcomes = ok_json("enqueue", "bulk", "--stdin", url=url, stdin="first\nsecond\n\nthird\n")
    assert len(outcomes) == 3 and not any(o["collapsed"] for o in outcomes)
    assert [t["data"] for t in ok_json("peek", "bulk", url=url)] == ["first", "second", "third"]
    assert "enqueued 2 tasks to bulk" in ok("enqueue", "bulk", "--stdin", url=url, stdin="4\n5")


def test_release_counts_an_attempt(broker: BrokerProcess) -> None:
    url = broker.url
    ok("enqueue", "jobs", "x", "--pid", "t", "--max-attempts", "1", url=url)
    [task] = ok_json("lease", "jobs", url=url)
    out = ok("release", "jobs", "t", str(task["lease_id"]), "--reason", "broken input", url=url)
    assert out == "released (moved to jobs.dead) jobs t\n"
    [dead] = ok_json("peek", "jobs.dead", url=url)
    assert dead["attempts"] == 1 and dead["headers"]["kittiwake-dead-reason"] == "broken input"


def test_lease_options(broker: BrokerProcess) -> None:
    url = broker.url
    for pid in ["b", "a", "c"]:
        ok("enqueue", "prio", pid, "--pid", pid, url=url)
    leased = ok_json("lease", "prio", "other", "--max-tasks", "5", "--max-pid", "b", "--lease-secs", "5",
                     "--worker", "cli-test", url=url)
    assert [t["pid"] for t in leased] == ["a", "b"]
    assert all(t["worker"] == "cli-test" for t in leased)
    assert ok("lease", "empty", "--wait", "0.2", url=url) == "no task available\n"


def test_peek_shows_binary_data_as_base64(broker: BrokerProcess) -> None:
    url = broker.url
    with Client(url) as client:
        client.enqueue("bin", b"\xff\x00\xfe", pid="1")
        client.enqueue("bin", "text ✓", pid="2")
    views = ok_json("peek", "bin", url=url)
    assert [(v["data"], v["data_encoding"]) for v in views] == [("/wD+", "base64"), ("text ✓", "utf-8")]
    assert all(v["state"] == "available" for v in views)
    assert [v["pid"] for v in ok_json("peek", "bin", "-n", "1", "--from-pid", "2", url=url)] == ["2"]
    table = ok("peek", "bin", url=url)
    assert "base64:/wD+" in table and "text ✓" in table


# ---------------------------------------------------------------- queues


def test_queues_with_pattern_and_min_tasks(broker: BrokerProcess) -> None:
    url = broker.url
    ok("enqueue", "orders#eu", "--stdin", url=url, stdin="1\n2\n3\n")
    ok("enqueue", "orders#us", "1", url=url)
    ok("enqueue", "logs", "1", url=url)
    assert [q["queue"] for q in ok_json("queues", url=url)] == ["logs", "orders#eu", "orders#us"]
    assert ok_json("queues", "--pattern", "^orders", "--min-tasks", "2", url=url) == [
        {"queue": "orders#eu", "size": 3, "leased": 0}
    ]
    assert len(ok_json("queues", "--limit", "1", url=url)) == 1
    table = ok("queues", url=url)
    assert "orders#eu" in table and "logs" in table


def test_queues_page_with_start_after(broker: BrokerProcess) -> None:
    url = broker.url
    with Client(url) as client:
        client.enqueue_many([{"queue": f"p.{index}", "data": b"x"} for index in range(5)])
    assert [q["queue"] for q in ok_json("queues", "--start-after", "p.1", "--limit", "2", url=url)] == ["p.2", "p.3"]
    assert [q["queue"] for q in ok_json("queues", "--start-after", "p.3", url=url)] == ["p.4"]
    table = ok("queues", "--limit", "2", url=url)
    assert "p.0" in table and "p.2" not in table and table.endswith("next page: --start-after p.1\n")
    assert "next page" not in ok("queues", "--start-after", "p.3", "--limit", "2", url=url)
    assert ok("queues", "--start-after", "p.4", url=url) == "no queues\n"
    assert "--start-after NAME" in ok("queues", "--help", url=url)


def test_joins_lists_what_the_broker_holds(broker: BrokerProcess) -> None:
    assert "no joins" in ok("joins", url=broker.url)
    with Client(broker.url) as client:
        client.declare_join("f#j", "f#jobs", required={"a": "f#a"}, optional={"b": "f#b"})
        client.enqueue("f#a", b"", pid="k")  # the only required port: the job starts at once
    [row] = ok_json("joins", url=broker.url)
    assert row["name"] == "f#j" and row["ports"] == [["a", "f#a", "required"], ["b", "f#b", "optional"]]
    assert "f#jobs" in ok("joins", "--pattern", "^f#", url=broker.url)


def test_stats_json_reports_every_field(broker: BrokerProcess) -> None:
    url = broker.url
    ok("enqueue", "work", "--stdin", url=url, stdin="a\nb\nc\n")
    [held, done] = ok_json("lease", "work", "--max-tasks", "2", "--worker", "worker-9", url=url)
    ok("dequeue", "work", done["pid"], str(done["lease_id"]), url=url)
    [stats] = ok_json("stats", "work", url=url)
    assert set(stats) == {
        "queue", "size", "available", "leased", "dead",
        "enqueue_rate_1m", "enqueue_rate_5m", "lease_rate_1m", "lease_rate_5m", "dequeue_rate_1m", "dequeue_rate_5m",
        "avg_lease_secs", "oldest_task_age_secs", "leased_sample", "blocked",
    }
    assert (stats["queue"], stats["size"], stats["available"], stats["leased"], stats["dead"]) == ("work", 2, 1, 1, 0)
    assert stats["enqueue_rate_1m"] == pytest.approx(3 / 60) and stats["enqueue_rate_5m"] == pytest.approx(3 / 300)
    assert stats["lease_rate_1m"] == pytest.approx(2 / 60) and stats["lease_rate_5m"] == pytest.approx(2 / 300)
    assert stats["dequeue_rate_1m"] == pytest.approx(1 / 60) and stats["dequeue_rate_5m"] == pytest.approx(1 / 300)
    assert stats["avg_lease_secs"] >= 0 and stats["oldest_task_age_secs"] >= 0
    [sample] = stats["leased_sample"]
    assert (sample["pid"], sample["worker"]) == (held["pid"], "worker-9")
    assert re.fullmatch(r"127\.0\.0\.1:\d+", sample["peer"])
    assert sample["expires_at"] == pytest.approx(held["expires_at"])
    table = ok("stats", "work", url=url)
    for label in ("size", "available", "leased", "dead", "enqueue rate", "avg lease", "oldest task age",
                  "worker-9", "127.0.0.1:"):
        assert label in table


def test_stats_of_several_queues_and_by_pattern(broker: BrokerProcess) -> None:
    url = broker.url
    for queue in ["s#a", "s#b", "t"]:
        ok("enqueue", queue, "x", url=url)
    assert [s["queue"] for s in ok_json("stats", "s#a", "t", url=url)] == ["s#a", "t"]
    assert [s["queue"] for s in ok_json("stats", "--pattern", "^s#", url=url)] == ["s#a", "s#b"]
    assert len(ok_json("stats", url=url)) == 3


def test_delete_queue(broker: BrokerProcess) -> None:
    url = broker.url
    ok("enqueue", "doomed", "--stdin", url=url, stdin="1\n2\n")
    refused = kittiwake("delete-queue", "doomed", url=url, stdin="n\n")
    assert refused.returncode != 0
    assert len(ok_json("peek", "doomed", url=url)) == 2
    assert ok("delete-queue", "doomed", "--yes", url=url) == "deleted doomed (2 tasks)\n"
    assert ok_json("peek", "doomed", url=url) == []
    assert ok_json("delete-queue", "doomed", "--yes", url=url) == {"queue": "doomed", "deleted": 0}
    assert kittiwake("delete-queue", "again", url=url, stdin="y\n").returncode == 0


def test_ping_and_the_url_from_the_environment(broker: BrokerProcess) -> None:
    done = kittiwake("ping", env={"KITTIWAKE_URL": broker.url})
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"{broker.url} answered in")
    answer = ok_json("ping", url=broker.url)
    assert answer["url"] == broker.url and answer["round_trip_ms"] > 0 and "now" in answer["broker"]


# ---------------------------------------------------------------- errors


@pytest.mark.parametrize(
    "args, code, exit_code",
    [
        (["enqueue", "not a queue!", "x"], "BAD_REQUEST", 1),
        (["lease", "jobs", "--max-tasks", "many"], "BAD_REQUEST", 2),
        (["lease", "jobs", "--max-tasks", "0"], "BAD_REQUEST", 2),
        (["enqueue", "jobs", "x", "--header", "no-equals"], "BAD_REQUEST", 2),
        (["enqueue", "jobs"], "BAD_REQUEST", 2),
        (["queues", "--pattern", "("], "BAD_REQUEST", 1),
        (["queues", "--start-after", "not a queue!"], "BAD_REQUEST", 1),
        (["dequeue", "jobs", "nope", "12"], "TASK_NOT_FOUND", 1),
        (["get", "jobs", "nope"], "TASK_NOT_FOUND", 1),
    ],
)
def test_errors_print_their_code_and_exit_non_zero(broker: BrokerProcess, args: list[str], code: str,
                                                  exit_code: int) -> None:
    done = kittiwake(*args, url=broker.url)
    assert done.returncode == exit_code
    assert re.search(rf"^error {code}: .+", done.stderr, re.MULTILINE), done.stderr
    assert done.stdout == ""


def test_a_stale_lease_is_refused_with_task_not_leased(broker: BrokerProcess) -> None:
    url = broker.url
    ok("enqueue", "jobs", "x", "--pid", "t", url=url)
    [stale] = ok_json("lease", "jobs", "--lease-secs", "0.2", url=url)
    time.sleep(0.6)
    ok_json("lease", "jobs", url=url)  # leased again: the first lease id is stale
    done = kittiwake("dequeue", "jobs", "t", str(stale["lease_id"]), url=url)
    assert done.returncode == 1
    assert done.stderr.startswith("error TASK_NOT_LEASED: ")


def test_bad_url_and_unreachable_broker() -> None:
    done = kittiwake("ping", url="http://localhost:1")
    assert (done.returncode, done.stderr.split(":")[0]) == (1, "error BAD_REQUEST")
    done = kittiwake("--connect-timeout", "0.2", "ping", url="kw://127.0.0.1:1")
    assert (done.returncode, done.stderr.split(":")[0]) == (1, "error BROKER_UNREACHABLE")


# ------------------------------------------------------------------ help


def test_the_group_lists_every_command() -> None:
    done = kittiwake("--help")
    assert done.returncode == 0
    for command in [*COMMANDS, "broker"]:
        assert re.search(rf"^  {command}\s", done.stdout, re.MULTILINE), command


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_has_help(command: str) -> None:
    done = kittiwake(command, "--help")
    assert done.returncode == 0
    assert done.stdout.startswith(f"Usage: kittiwake {command} ")
    description = done.stdout.split("\n\n")[1].strip()
    assert len(description) > 20
