"""The docs' examples of the task layer run as written: examples/shop.py ("Tasks and workers"),
examples/hello.py (the README's App + worker) and examples/alice_shop.py (an app under one user, on a
broker with an auth file: docs/security.md) against real workers."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from kittiwake import Client
from support.auth_users import ALICE, ROOT, standard_auth_file
from support.broker_process import BrokerProcess
from worker.harness import TESTS_DIR, workers

EXAMPLES = TESTS_DIR.parent / "examples"
EXPECTED = """\
49
328350
order 1: 1 items True
failed: ValueError order 2 is empty
['order 3: 1 items', 'order 4: 2 items', 3, 'sent: shelves are full']
pending sent: good morning
['sent: ada', 'sent: grace']
"""
HELLO_EXPECTED = """\
144
[0, 1, 4, 9, 16, 25, 36, 49, 64, 81]
"""


def run_example(broker: BrokerProcess, tmp_path: Path, app: str, script: str, *worker_args: str, url: str = "") -> str:
    path = os.pathsep.join([str(EXAMPLES), str(TESTS_DIR)])
    url = url or broker.url
    processes = int(worker_args[worker_args.index("--processes") + 1]) if "--processes" in worker_args else 1
    with workers(url, tmp_path, *worker_args, app=app, env={"PYTHONPATH": path}, processes=processes):
        done = subprocess.run(
            [sys.executable, script], cwd=EXAMPLES, capture_output=True, text=True, timeout=120,
            env={**os.environ, "KITTIWAKE_URL": url},
        )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_shop_example_prints_what_the_docs_say(broker: BrokerProcess, tmp_path: Path) -> None:
    assert run_example(broker, tmp_path, "shop:app", "shop.py", "--processes", "2", "--concurrency", "4") == EXPECTED


def test_the_hello_example_prints_what_the_readme_says(broker: BrokerProcess, tmp_path: Path) -> None:
    assert run_example(broker, tmp_path, "hello:app", "hello.py") == HELLO_EXPECTED


def test_the_one_user_example_stays_inside_alices_prefix(tmp_path: Path) -> None:
    secured = BrokerProcess(tmp_path / "data", auth_file=standard_auth_file(tmp_path / "users.json"))
    try:
        alice = secured.client_url(*ALICE)  # alice: alice.*=all, nothing else
        out = run_example(secured, tmp_path, "alice_shop:app", "alice_shop.py",
                          "--queues", "alice.shop,alice.shop.gang", "--registry-queue", "alice.workers", url=alice)
        assert out == "49\n"
        assert "FORBIDDEN" not in (tmp_path / "worker.log").read_text()
        with Client(secured.client_url(*ROOT)) as root:
            names = [info.queue for info in root.list_queues()]
        assert "alice.workers" in names and all(name.startswith("alice.") for name in names), names
    finally:
        secured.kill()
