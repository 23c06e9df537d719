"""How a process that only sends Celery tasks (a web app calling `.delay()`, no `celery` command)
finds the `kittiwake://` transport: each case is a fresh interpreter, started without kittiwake
imported, publishing to a real broker.

kombu 5.7 resolves a URL's scheme only through `kombu.transport.TRANSPORT_ALIASES`, reads no entry
points for transports, and refuses an import path in a URL's scheme (`_check_url_transport`), so
no install step can make the bare URL work: the producer imports `kittiwake.kombu` or names the
transport in `broker_transport`. The last test pins that, so a kombu that starts reading transport
entry points shows up here.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import kittiwake
from kittiwake.kombu import TRANSPORT_PATH

pytestmark = pytest.mark.timeout(60)

PRODUCER_SCRIPT = textwrap.dedent(
    """
    import sys
    from celery import Celery

    url, way = sys.argv[1], sys.argv[2]
    settings = {}
    if way == "import":
        import kittiwake.kombu
    elif way == "broker_transport":
        settings["broker_transport"] = sys.argv[3]
    before_send = "kittiwake" in sys.modules
    app = Celery("producer", broker=url, **settings)

    @app.task
    def add(x, y):
        return x + y

    result = add.delay(2, 3)
    print(result.id, before_send, flush=True)
    """
)


def send_from_fresh_interpreter(url: str, way: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", PRODUCER_SCRIPT, url, way, *args], cwd=cwd, capture_output=True, text=True, timeout=45
    )


def queued_messages(broker) -> list[bytes]:
    """The messages in Celery's default queue, as the broker holds them."""
    with kittiwake.Client(broker.url) as client:
        return [view.data for view in client.peek("celery")]


def test_producer_naming_the_transport_in_broker_transport_sends_a_task(broker, tmp_path: Path) -> None:
    done = send_from_fresh_interpreter(
        f"kittiwake://{broker.host}:{broker.port}", "broker_transport", TRANSPORT_PATH, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    task_id, imported_before_send = done.stdout.split()
    assert imported_before_send == "False"  # kombu imported the transport from the setting
    [data] = queued_messages(broker)
    assert task_id.encode() in data


def test_producer_importing_kittiwake_kombu_sends_a_task(broker, tmp_path: Path) -> None:
    done = send_from_fresh_interpreter(f"kittiwake://{broker.host}:{broker.port}", "import", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    task_id, _ = done.stdout.split()
    [data] = queued_messages(broker)
    assert task_id.encode() in data


def test_producer_with_only_the_url_is_refused_until_kombu_reads_transport_entry_points(
    broker, tmp_path: Path
) -> None:
    done = send_from_fresh_interpreter(f"kittiwake://{broker.host}:{broker.port}", "url", cwd=tmp_path)
    assert done.returncode != 0, "kombu found kittiwake:// by itself: register it where kombu now looks"
    assert "KeyError: 'No such transport: kittiwake'" in done.stderr, done.stderr
    assert queued_messages(broker) == []
