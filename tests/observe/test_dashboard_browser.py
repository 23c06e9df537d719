"""The dashboard in a real browser against real brokers: what it shows is what the API says, it follows
the broker live, its buttons act on the broker, and it asks for a login when the broker has users.

Debian's chromium, driven by Playwright (one browser for the module; a fresh
context, so fresh cookies, per test). Brokers are subprocesses with
`--http-port`; tasks are made by clients over the binary protocol and checked
the same way, and the API's own answers are read over plain HTTP to compare
with the page. Any uncaught error in the page, or anything its
Content-Security-Policy blocks, fails the test that caused it.

Without /usr/bin/chromium (`make browser-deps` installs it) the module skips,
except under CI=true, where it fails. `test_screenshot` writes
`docs/figures/dashboard.png` when KITTIWAKE_WRITE_SCREENSHOT=1 (with a longer
workload, so the charts have an hour's worth of shape to show), else into the
test's temporary directory.
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import random
import socket
import threading
import time
from pathlib import Path
from typing import Any, Iterator
from urllib.parse import parse_qs, urlsplit

import pytest

from kittiwake import errors
from kittiwake.app import App
from kittiwake.client import Client
from support.auth_users import ALICE, ROOT, standard_auth_file
from support.broker_process import BrokerProcess

CHROMIUM = Path("/usr/bin/chromium")
REPO = Path(__file__).resolve().parents[2]
SCREENSHOT = REPO / "docs" / "figures" / "dashboard.png"
COUNTS = ("size", "available", "leased", "blocked", "dead")
TIMEOUT_MS = 15_000

builds = App()


@builds.task(queue="builds.part")
def build_part(part: int) -> int:
    return part


@builds.task(queue="builds.link")
def link_parts() -> str:
    return "linked"


try:
    from playwright.sync_api import Browser, Page, expect, sync_playwright
except ImportError:  # pragma: no cover - the lock file installs it
    sync_playwright = None


def _missing() -> str | None:
    if sync_playwright is None:
        return "playwright is not installed (it is in requirements.lock: make setup)"
    if not CHROMIUM.exists():
        return f"{CHROMIUM} is missing: `make browser-deps` installs Debian's chromium"
    return None


@pytest.fixture(scope="module", autouse=True)
def chromium_present() -> None:
    """Skip the module (fail it under CI=true) before any broker starts when there is no browser."""
    reason = _missing()
    if reason is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true and the dashboard's browser tests cannot run: {reason}")
        pytest.skip(reason)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    expect.set_options(timeout=TIMEOUT_MS)
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=["--no-sandbox"])
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    opened = context.new_page()
    opened.set_default_timeout(TIMEOUT_MS)
    thrown: list[str] = []
    opened.on("pageerror", lambda error: thrown.append(str(error)))
    opened.on("console", lambda message: thrown.append(message.text)
              if message.type == "error" and "Content Security Policy" in message.text else None)
    yield opened
    context.close()
    assert not thrown, f"the page threw or broke its own Content-Security-Policy: {thrown}"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def open_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    # a fixed HTTP port, so the page finds the broker again after a restart
    port = free_port()
    with BrokerProcess(tmp_path_factory.mktemp("dashboard") / "data", extra_args=["--http-port", str(port)]) as process:
        yield process


@pytest.fixture(scope="module")
def client(open_broker: BrokerProcess) -> Iterator[Client]:
    made = Client(open_broker.url)
    try:
        yield made
    finally:
        made.close()


@pytest.fixture(scope="module")
def auth_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    directory = tmp_path_factory.mktemp("dashboard-auth")
    users = standard_auth_file(directory / "users.json")
    with BrokerProcess(directory / "data", extra_args=["--http-port", "0"], auth_file=users) as process:
        yield process


def address(broker: BrokerProcess, fragment: str = "") -> str:
    return f"{broker.http_endpoint}/{fragment}"


def api(broker: BrokerProcess, path: str, credentials: tuple[str, str] | None = None) -> tuple[int, Any]:
    """GET an API path over plain HTTP: (status, decoded JSON)."""
    headers = {}
    if credentials is not None:
        headers["Authorization"] = "Basic " + base64.b64encode(":".join(credentials).encode()).decode()
    connection = http.client.HTTPConnection(broker.host, broker.http_port, timeout=10)
    try:
        connection.request("GET", path, headers=headers)
        response = connection.getresponse()
        return response.status, json.loads(response.read())
    finally:
        connection.close()


def peek_all(client: Client, queue: str) -> list[Any]:
    try:
        return client.peek(queue, 100)
    except errors.QueueNotFound:
        return []


def shown_rows(page: Page) -> list[list[str | None]]:
    """The queue table as the page shows it: name, then the value of each count column."""
    return [
        [row.get_attribute("data-queue"),
         *(row.get_by_test_id(f"cell-{key}").get_attribute("data-value") for key in COUNTS)]
        for row in page.get_by_test_id("queue-row").all()
    ]


def api_rows(answer: dict[str, Any]) -> list[list[str | None]]:
    return [[row["queue"], *(str(row[key]) for key in COUNTS)] for row in answer["queues"]]


def queue_requests(urls: list[str]) -> list[dict[str, str]]:
    """The query parameters of each GET /api/queues the page sent."""
    return [{key: values[-1] for key, values in parse_qs(urlsplit(url).query).items()}
            for url in urls if urlsplit(url).path == "/api/queues"]


# ------------------------------------------------------------------ what it shows


def test_the_queue_table_and_a_queue_page_show_the_counts_of_the_api(
    open_broker: BrokerProcess, client: Client, page: Page,
) -> None:
    for queue, count in (("table.alpha", 5), ("table.beta", 3), ("table.gamma", 7)):
        client.enqueue_many([{"queue": queue, "data": f"{queue} {i}"} for i in range(count)])
    held = client.lease("table.gamma", max_tasks=3, lease_secs=300)
    client.release(held[0], "ValueError: broken", bury=True)
    client.enqueue("table.beta", b"after gamma", after=[held[1]])  # blocked until its parent finishes

    page.goto(address(open_broker, "#/queues?filter=table."))
    status, answer = api(open_broker, "/api/queues?filter=table.")
    assert status == 200
    expected = api_rows(answer)
    assert expected == [
        ["table.alpha", "5", "5", "0", "0", "0"],
        ["table.beta", "4", "3", "0", "1", "0"],
        ["table.gamma", "6", "4", "2", "0", "1"],
    ]
    expect(page.get_by_test_id("queue-row")).to_have_count(3)
    assert shown_rows(page) == expected
    gamma = page.locator("[data-testid=queue-row][data-queue='table.gamma']")
    expect(gamma.get_by_test_id("cell-dead")).to_have_text("1")
    expect(page.get_by_test_id("queues-range")).to_have_text("1–3 of 3")

    _, overview = api(open_broker, "/api/overview")
    expect(page.get_by_test_id("overview-tasks-value")).to_have_text(f"{overview['totals']['tasks']:,}")
    expect(page.get_by_test_id("overview-dead-value")).to_have_text(f"{overview['totals']['dead']:,}")

    gamma.get_by_role("link").click()
    expect(page.get_by_test_id("queue-name")).to_have_text("table.gamma")
    _, one = api(open_broker, "/api/queue?name=table.gamma")
    for key in COUNTS:
        expect(page.get_by_test_id(f"stat-{key}-value")).to_have_text(f"{one['stats'][key]:,}")
    expect(page.get_by_test_id("task-row")).to_have_count(6)
    page.get_by_test_id("tab-leased").click()
    expect(page.get_by_test_id("leased-row")).to_have_count(len(one["leased"]))
    page.get_by_test_id("tab-dead").click()
    expect(page.get_by_test_id("dead-row")).to_have_count(1)
    expect(page.get_by_test_id("dead-reason")).to_have_text("ValueError: broken")


def test_the_table_follows_the_broker_live_without_reloading(
    open_broker: BrokerProcess, client: Client, page: Page,
) -> None:
    page.goto(address(open_broker, "#/queues?filter=live."))
    expect(page.get_by_test_id("queues-empty")).to_be_visible()
    expect(page.get_by_test_id("stream-status")).to_have_attribute("data-state", "live")
    page.evaluate("window.sameDocument = true")
    fetched: list[str] = []
    page.on("request", lambda request: fetched.append(request.url))
    navigated: list[str] = []
    page.on("framenavigated", lambda frame: navigated.append(frame.url) if frame == page.main_frame else None)

    client.enqueue_many([{"queue": "live.orders", "data": b"x"} for _ in range(4)])
    row = page.locator("[data-testid=queue-row][data-queue='live.orders']")
    expect(row.get_by_test_id("cell-size")).to_have_text("4")
    client.enqueue_many([{"queue": "live.orders", "data": b"y"} for _ in range(3)])
    client.enqueue("live.mail", b"z")
    expect(row.get_by_test_id("cell-size")).to_have_text("7")
    expect(page.get_by_test_id("queue-row")).to_have_count(2)

    assert page.evaluate("window.sameDocument") is True, "the page reloaded"
    assert navigated == []
    assert queue_requests(fetched) == [], "the rows came pushed by the stream, not fetched"


def test_the_page_reconnects_when_the_stream_drops(open_broker: BrokerProcess, client: Client, page: Page) -> None:
    client.enqueue("again.q", b"1")
    page.goto(address(open_broker, "#/queues?filter=again."))
    row = page.locator("[data-testid=queue-row][data-queue='again.q']")
    expect(row.get_by_test_id("cell-size")).to_have_text("1")
    expect(page.get_by_test_id("stream-status")).to_have_attribute("data-state", "live")
    page.evaluate("window.sameDocument = true")

    open_broker.kill()
    expect(page.get_by_test_id("stream-status")).to_have_attribute("data-state", "reconnecting")
    open_broker.restart()
    with Client(open_broker.url) as fresh:
        fresh.enqueue("again.q", b"2")
    expect(row.get_by_test_id("cell-size")).to_have_text("2", timeout=30_000)
    expect(page.get_by_test_id("stream-status")).to_have_attribute("data-state", "live")
    assert page.evaluate("window.sameDocument") is True


def test_a_queue_page_waits_for_a_queue_that_holds_nothing(
    open_broker: BrokerProcess, client: Client, page: Page,
) -> None:
    page.goto(address(open_broker, "#/queue/ghost.q"))
    expect(page.get_by_test_id("queue-missing")).to_be_visible()
    expect(page.get_by_test_id("stream-status")).to_have_attribute("data-state", "live")  # on the overview meanwhile
    client.enqueue_many([{"queue": "ghost.q", "data": b"boo"}, {"queue": "ghost.q", "data": b"boo"}])
    expect(page.get_by_test_id("stat-size-value")).to_have_text("2")
    expect(page.get_by_test_id("task-row")).to_have_count(2)
    for task in client.lease("ghost.q", max_tasks=2):
        client.dequeue(task)
    expect(page.get_by_test_id("stat-size-value")).to_have_text("0")
    expect(page.get_by_test_id("tasks-empty")).to_be_visible()
    client.delete_queue("ghost.q")
    expect(page.get_by_test_id("queue-missing")).to_be_visible()  # gone: the stream said so


def test_numbers_times_and_routes_read_as_people_read_them(open_broker: BrokerProcess, page: Page) -> None:
    page.goto(address(open_broker))
    results = page.evaluate("""async () => {
      const format = await import("/static/format.js");
      const chart = await import("/static/chart.js");
      const routes = await import("/static/routes.js");
      const views = {queues: 1, queue: 1};
      return {
        counts: [format.count(0), format.count(1234567), format.count(null)],
        rates: [format.rate(0), format.rate(0.05), format.rate(2.345), format.rate(1234.4)],
        durations: [0.0421, 3.21, 42, 75, 7322, 200000].map(format.duration),
        axis: [0, 0.25, 1.5, 120].map(format.durationShort),
        preview: [format.preview("a  b\\nc", "utf-8"), format.preview("AAEC", "base64"),
                  format.preview("x".repeat(200), "utf-8").length],
        ticks: [chart.niceTicks(7), chart.niceTicks(0.9), chart.niceTicks(1300)],
        gaps: chart.segments([{t: 0, v: 1}, {t: 10, v: null}, {t: 20, v: 2}, {t: 30, v: 3}, {t: 100, v: 4}], "v", 10),
        windows: [chart.timeWindow([], 10), chart.timeWindow([{t: 0}, {t: 50}], 10),
                  chart.timeWindow([{t: 0}, {t: 1200}], 10), chart.timeWindow([{t: 0}, {t: 9000}], 10)],
        route: routes.parseRoute("#/queue/a%2Fb%3Fc?tab=dead", views),
        fallback: routes.parseRoute("#/nowhere", views),
        hash: routes.routeHash("queue", "a/b?c", {tab: "dead", from: ""}),
      };
    }""")
    assert results["counts"] == ["0", "1,234,567", "—"]
    assert results["rates"] == ["0", "0.05", "2.3", "1,234"]
    assert results["durations"] == ["42 ms", "3.2 s", "42 s", "1m 15s", "2h 02m", "2d 7h"]
    assert results["axis"] == ["0", "250ms", "1.5s", "2m"]
    assert results["preview"] == ["a b c", "binary, 3 bytes", 96]
    assert results["ticks"] == [[0, 2, 4, 6, 8], [0, 0.25, 0.5, 0.75, 1], [0, 500, 1000, 1500]]
    assert results["gaps"] == [[[0, 1]], [[20, 2], [30, 3]], [[100, 4]]]
    assert results["windows"] == [3600, 300, 1260, 3600]
    assert results["route"] == {"name": "queue", "arg": "a/b?c", "params": {"tab": "dead"}}
    assert results["fallback"] == {"name": "queues", "arg": None, "params": {}}
    assert results["hash"] == "#/queue/a%2Fb%3Fc?tab=dead"


# ------------------------------------------------------------------ what it does


def test_a_dead_letter_requeued_from_the_page_is_back_in_its_queue(
    open_broker: BrokerProcess, client: Client, page: Page,
) -> None:
    client.enqueue("requeue.q", b'{"order": 7}')
    [task] = client.lease("requeue.q", lease_secs=300)
    client.release(task, "ValueError: card declined", bury=True)
    assert peek_all(client, "requeue.q") == []

    page.goto(address(open_broker, "#/queue/requeue.q?tab=dead"))
    row = page.get_by_test_id("dead-row")
    expect(row).to_have_count(1)
    expect(row).to_have_attribute("data-task-pid", task.pid)
    expect(row.get_by_test_id("dead-reason")).to_have_text("ValueError: card declined")

    row.get_by_test_id("requeue-dead").click()
    row.get_by_test_id("confirm-no").click()  # asked, then kept: nothing is sent
    expect(row.get_by_test_id("requeue-dead")).to_be_visible()
    row.get_by_test_id("requeue-dead").click()
    expect(row.get_by_test_id("confirm-yes")).to_be_focused()
    page.keyboard.press("Escape")  # taken back from the keyboard too
    expect(row.get_by_test_id("requeue-dead")).to_be_visible()
    assert peek_all(client, "requeue.q") == [] and len(peek_all(client, "requeue.q.dead")) == 1

    row.get_by_test_id("requeue-dead").click()
    row.get_by_test_id("confirm-yes").click()
    expect(page.get_by_test_id("action-notice")).to_have_text("Requeued 1 dead letter.")
    expect(page.get_by_test_id("dead-empty")).to_be_visible()
    [back] = peek_all(client, "requeue.q")
    assert (back.pid, back.data, back.state, back.attempts) == (task.pid, b'{"order": 7}', "available", 0)
    assert peek_all(client, "requeue.q.dead") == []


def test_cancel_and_delete_from_the_page_and_refusals_shown_in_place(
    open_broker: BrokerProcess, client: Client, page: Page,
) -> None:
    first = client.enqueue("cancel.q", b"first")
    second = client.enqueue("cancel.q", b"second")

    page.goto(address(open_broker, "#/queue/cancel.q"))
    row = page.locator(f"[data-testid=task-row][data-pid='{first.pid}']")
    row.get_by_test_id("cancel-task").click()
    row.get_by_test_id("confirm-yes").click()
    expect(page.get_by_test_id("action-notice")).to_contain_text("Cancelled 1 task")
    expect(page.get_by_test_id("task-row")).to_have_count(1)
    [dead] = peek_all(client, "cancel.q.dead")
    assert dead.data == b"first"

    page.get_by_test_id("tab-dead").click()
    row = page.get_by_test_id("dead-row")
    expect(row).to_have_count(1)
    expect(row.get_by_test_id("dead-reason")).to_contain_text("CANCELLED")
    row.get_by_test_id("purge-dead").click()
    row.get_by_test_id("confirm-yes").click()
    expect(page.get_by_test_id("action-notice")).to_have_text("Deleted 1 dead letter.")
    assert peek_all(client, "cancel.q.dead") == []

    # a dead letter whose task exists again cannot go back: the broker says why, in place
    [held] = client.lease("cancel.q", lease_secs=300)
    assert held.pid == second.pid
    client.release(held, "boom", bury=True)
    client.enqueue("cancel.q", b"second again", pid=second.pid)
    expect(page.get_by_test_id("dead-row")).to_have_count(1)
    page.get_by_test_id("dead-row").get_by_test_id("requeue-dead").click()
    page.get_by_test_id("dead-row").get_by_test_id("confirm-yes").click()
    expect(page.get_by_test_id("action-error")).to_contain_text("TASK_EXISTS")
    assert len(peek_all(client, "cancel.q.dead")) == 1
    assert [task.data for task in peek_all(client, "cancel.q")] == [b"second again"]


def test_sorting_filtering_and_paging_go_to_the_server_and_back(
    open_broker: BrokerProcess, client: Client, page: Page,
) -> None:
    sizes = {f"sort.{index:02d}": 1 + (index * 7) % 5 for index in range(30)}
    client.enqueue_many([{"queue": queue, "data": b"."} for queue, size in sizes.items() for _ in range(size)])
    fetched: list[str] = []
    page.on("request", lambda request: fetched.append(request.url))
    page.goto(address(open_broker, "#/queues?filter=sort."))
    expect(page.get_by_test_id("queues-range")).to_have_text("1–30 of 30")

    page.get_by_test_id("sort-size").click()
    expect(page).to_have_url(address(open_broker, "#/queues?filter=sort.&sort=size"))
    expect(page.get_by_test_id("sort-size").locator("xpath=..")).to_have_attribute("aria-sort", "descending")
    asked = queue_requests(fetched)[-1]
    assert (asked["filter"], asked["sort"], asked["order"]) == ("sort.", "size", "desc")
    _, answer = api(open_broker, "/api/queues?filter=sort.&sort=size&order=desc")
    expect(page.get_by_test_id("queue-row").first).to_have_attribute("data-queue", answer["queues"][0]["queue"])
    assert shown_rows(page) == api_rows(answer)

    page.get_by_test_id("sort-size").click()
    expect(page.get_by_test_id("sort-size").locator("xpath=..")).to_have_attribute("aria-sort", "ascending")
    _, answer = api(open_broker, "/api/queues?filter=sort.&sort=size&order=asc")
    expect(page.get_by_test_id("queue-row").first).to_have_attribute("data-queue", answer["queues"][0]["queue"])
    assert shown_rows(page) == api_rows(answer)
    assert queue_requests(fetched)[-1]["order"] == "asc"

    page.get_by_test_id("queues-limit").select_option("25")
    page.get_by_test_id("queues-next").click()
    expect(page.get_by_test_id("queues-range")).to_have_text("26–30 of 30")
    asked = queue_requests(fetched)[-1]
    assert (asked["offset"], asked["limit"]) == ("25", "25")
    _, answer = api(open_broker, "/api/queues?filter=sort.&sort=size&order=asc&offset=25&limit=25")
    assert shown_rows(page) == api_rows(answer)

    page.get_by_test_id("queues-filter").fill("sort.1*")  # a glob, matched by the broker
    expect(page.get_by_test_id("queues-range")).to_have_text("1–10 of 10")
    assert queue_requests(fetched)[-1]["filter"] == "sort.1*"
    _, answer = api(open_broker, "/api/queues?filter=sort.1*&sort=size&order=asc&limit=25")
    assert shown_rows(page) == api_rows(answer)

    page.get_by_test_id("queues-filter").fill("sort.[")  # refused by the broker: shown, not thrown
    expect(page.get_by_test_id("queues-error")).to_contain_text("BAD_REQUEST")

    page.reload()  # the address holds the view: a link shows the same page
    expect(page.get_by_test_id("queues-filter")).to_have_value("sort.[")
    page.goto(address(open_broker, "#/queues?filter=sort.1*&sort=size&order=asc&limit=25"))
    expect(page.get_by_test_id("queues-range")).to_have_text("1–10 of 10")
    assert shown_rows(page) == api_rows(answer)


def test_jobs_and_flow_runs_show_their_state_as_the_api_derives_it(
    open_broker: BrokerProcess, client: Client, page: Page, tmp_path: Path,
) -> None:
    from flow import pipelines

    builds.url = open_broker.url
    try:
        job = builds.job("nightly build")
        parts = [job.add(build_part, part) for part in range(3)]
        link = job.add(link_parts, after=parts)
        job.submit()
    finally:
        builds.close()
    run = pipelines.tiny.run(client, {"numbers": [1, 2, 3]}, data_dir=tmp_path)  # no worker: it waits

    page.goto(address(open_broker, "#/jobs"))
    _, jobs = api(open_broker, "/api/jobs?limit=100")
    [record] = [record for record in jobs["jobs"] if record["id"] == job.id]
    assert (record["name"], record["nodes"], record["state"]) == ("nightly build", 4, "waiting")
    row = page.locator(f"[data-testid=job-row][data-job='{job.id}']")
    expect(row.get_by_test_id("job-state")).to_have_text("waiting")
    expect(page.get_by_test_id("job-row")).to_have_count(len(jobs["jobs"]))

    client.cancel((link.queue, link.pid))  # its sink dead-lettered: the job failed, and the page follows
    expect(row.get_by_test_id("job-state")).to_have_text("failed")
    assert [r["state"] for r in api(open_broker, "/api/jobs?limit=100")[1]["jobs"] if r["id"] == job.id] == ["failed"]

    page.get_by_test_id("nav-flows").click()
    _, flows = api(open_broker, "/api/flows?limit=50")
    [status] = [status for status in flows["runs"] if status["run"] == run.id]
    row = page.locator(f"[data-testid=flow-row][data-run='{run.id}']")
    expect(row.get_by_test_id("flow-state")).to_have_text(status["state"])
    expect(row.get_by_test_id("flow-step")).to_have_count(len(status["steps"]))
    row.get_by_test_id("flow-toggle").click()
    expect(page.get_by_test_id("flow-detail")).to_contain_text("spread")


# ------------------------------------------------------------------ auth


def test_with_auth_the_page_asks_for_a_login_and_the_api_refuses_without_one(
    auth_broker: BrokerProcess, page: Page,
) -> None:
    with Client(auth_broker.client_url(*ROOT)) as root:
        root.enqueue_many([{"queue": "alice.jobs", "data": b"a"}, {"queue": "alice.jobs", "data": b"b"},
                           {"queue": "bob.jobs", "data": b"c"}])
    assert api(auth_broker, "/api/queues")[0] == 401
    assert api(auth_broker, "/api/queues", ALICE)[0] == 200

    page.goto(address(auth_broker))
    expect(page.get_by_test_id("login-form")).to_be_visible()
    expect(page.get_by_test_id("nav")).to_be_hidden()
    assert page.evaluate("fetch('/api/queues').then(r => r.status)") == 401

    page.get_by_test_id("login-user").fill(ALICE[0])
    page.get_by_test_id("login-token").fill("not-the-token")
    page.get_by_test_id("login-submit").click()
    expect(page.get_by_test_id("login-error")).to_contain_text("UNAUTHORIZED")

    page.get_by_test_id("login-token").fill(ALICE[1])
    page.get_by_test_id("login-submit").click()
    expect(page.get_by_test_id("user-name")).to_have_text("alice")
    expect(page.get_by_test_id("queue-row")).to_have_count(1)  # alice administers alice.* only
    _, answer = api(auth_broker, "/api/queues", ALICE)
    assert shown_rows(page) == api_rows(answer) == [["alice.jobs", "2", "2", "0", "0", "0"]]
    assert page.evaluate("fetch('/api/queues').then(r => r.status)") == 200

    with Client(auth_broker.client_url(*ALICE)) as alice:  # the stream runs on the session's cookie too
        alice.enqueue("alice.jobs", b"c")
    expect(page.get_by_test_id("queue-row").get_by_test_id("cell-size")).to_have_text("3")

    page.get_by_test_id("logout").click()
    expect(page.get_by_test_id("login-form")).to_be_visible()
    assert page.evaluate("fetch('/api/queues').then(r => r.status)") == 401
    page.reload()
    expect(page.get_by_test_id("login-form")).to_be_visible()


def test_a_cluster_node_shows_its_cluster_page_with_the_three_nodes(
    tmp_path: Path, open_broker: BrokerProcess, page: Page,
) -> None:
    from kittiwake.testing.cluster_nodes import ClusterNodes

    page.goto(address(open_broker))  # a broker that is no node has no cluster link
    expect(page.get_by_test_id("overview-queues-value")).to_be_visible()
    expect(page.get_by_test_id("nav-cluster")).to_be_hidden()

    with ClusterNodes(tmp_path, ["a", "b", "c"], args=["--durability", "os", "--http-port", "0"]) as nodes:
        with Client(nodes["c"].url) as c:
            c.enqueue("work", b"x")
        a = nodes["a"]
        page.goto(f"http://{a.host}:{a.http_port}/")
        page.get_by_test_id("nav-cluster").click()
        rows = page.get_by_test_id("cluster-node-row")
        expect(rows).to_have_count(3)
        assert [rows.nth(index).get_attribute("data-node") for index in range(3)] == ["a", "b", "c"]
        for index in range(3):
            expect(rows.nth(index)).to_have_attribute("data-state", "up")
        expect(rows.nth(2).get_by_test_id("cluster-node-tasks")).to_have_text("1")
        expect(page.get_by_test_id("cluster-holder-row")).to_have_attribute("data-queue", "work")
        status, answer = api(a, "/api/cluster")  # what the page shows is what the API says
        assert status == 200
        expect(page.get_by_test_id("cluster-epoch")).to_have_text(answer["epoch"])
        expect(page.get_by_test_id("cluster-deviation")).to_have_text(f"{answer['load_deviation']:g}%")
        assert page.title().startswith("Cluster")


# ------------------------------------------------------------------ the picture in docs/observability.md


@pytest.mark.timeout(900)  # KITTIWAKE_WRITE_SCREENSHOT=1 runs the shop for five minutes
def test_screenshot(tmp_path: Path, browser: Browser) -> None:
    """A small shop's broker: five queues, two workers, a few dead letters, some blocked tasks."""
    from observe import dashboard_tasks as shop
    from worker.harness import WorkerProcess

    write = os.environ.get("KITTIWAKE_WRITE_SCREENSHOT") == "1"
    workload_secs = float(os.environ.get("KITTIWAKE_SCREENSHOT_SECS", 300 if write else 2))
    target = SCREENSHOT if write else tmp_path / "dashboard.png"
    with BrokerProcess(tmp_path / "data", extra_args=["--http-port", "0"]) as shop_broker:
        shop.app.url = shop_broker.url
        logs = tmp_path / "workers.log"
        mail = WorkerProcess(shop_broker.url, logs, "--queues", "emails.send,images.resize", "--concurrency", "3",
                             "--name", "mail", app="observe.dashboard_tasks:app")
        orders = WorkerProcess(shop_broker.url, logs, "--queues", "orders.charge,images.resize", "--concurrency", "2",
                               "--name", "orders", app="observe.dashboard_tasks:app")
        stop = threading.Event()
        producer = threading.Thread(target=_shop_traffic, args=(shop, stop), daemon=True)
        try:
            with Client(shop_broker.url) as client:
                index = [shop.index_products.submit(shard) for shard in range(40)]
                client.enqueue_many([{"queue": "reports.daily", "data": json.dumps({"day": f"2026-11-{day:02d}"}),
                                      "after": [(index[day].queue, index[day].pid)]} for day in range(1, 13)])
            producer.start()
            time.sleep(workload_secs)  # the history gains a point every 10 s
            context = browser.new_context(viewport={"width": 1440, "height": 960})
            shot = context.new_page()
            shot.goto(address(shop_broker, "#/workers"))
            expect(shot.locator("[data-testid=worker-row][data-state=alive]")).to_have_count(2)
            shot.goto(address(shop_broker, "#/queues"))
            for queue in ("emails.send", "images.resize", "orders.charge", "reports.daily", "search.index"):
                expect(shot.locator(f"[data-testid=queue-row][data-queue='{queue}']")).to_have_count(1)
            expect(shot.get_by_test_id("overview-workers-value")).to_have_text("2")
            expect(shot.get_by_test_id("stream-status")).to_have_attribute("data-state", "live")
            shot.wait_for_timeout(1500)  # a stream event or two, so the figures are this second's
            shot.screenshot(path=str(target), full_page=True)
            context.close()
        finally:
            stop.set()
            if producer.is_alive():
                producer.join(10)
            mail.kill()
            orders.kill()
            shop.app.close()
    assert target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _shop_traffic(shop: Any, stop: threading.Event) -> None:
    """Orders, mail and images arriving in waves until `stop`."""
    randomness = random.Random(7)
    start = time.monotonic()
    order = 0
    while not stop.is_set():
        wave = 1.0 + 0.6 * abs(((time.monotonic() - start) / 60.0) % 2 - 1)
        mail = [f"customer{randomness.randrange(10_000)}@example.com" for _ in range(int(12 * wave))]
        shop.app.map(shop.send_email, mail)
        for _ in range(int(4 * wave)):
            shop.resize_image.submit(f"product-{randomness.randrange(500)}.jpg", randomness.choice((320, 640, 1280)))
        for _ in range(int(3 * wave)):
            order += 1
            shop.charge_order.submit(order, randomness.randrange(500, 20_000))
        stop.wait(0.5)
