"""Running tasks with Kittiwake: define tasks on an App, start workers, submit work, get results.

From this directory, with a broker running (`kittiwake broker --data ./.kittiwake &`):

    kittiwake worker shop:app --processes 2 --concurrency 4 &
    python shop.py

The broker is `$KITTIWAKE_URL` if set, else kw://127.0.0.1:7370.
"""

from __future__ import annotations

from kittiwake.app import App, TaskContext, TaskFailed

app = App()  # the broker at $KITTIWAKE_URL, else kw://127.0.0.1:7370; it connects on first use


@app.task(queue="shop")
def square(x: int) -> int:
    return x * x


@app.task(queue="shop", max_attempts=3, retry_on=(ConnectionError,))
def checkout(order: dict) -> str:
    if not order["items"]:
        raise ValueError(f"order {order['id']} is empty")  # not retried: only ConnectionError is
    return f"order {order['id']}: {len(order['items'])} items"


@app.task(queue="shop", bind=True, lease_secs=10, timeout=60)
def restock(task: TaskContext, items: list[str]) -> int:
    for done, item in enumerate(items, start=1):
        task.progress(done / len(items), f"restocked {item}")  # handle.status() shows it
    return len(items)


@app.task(queue="shop", rate_limit="100/s")
def notify(message: str) -> str:
    return f"sent: {message}"


@app.periodic(cron="0 * * * *", queue="shop")  # fired by workers started with --beat, once per hour
def hourly_report() -> None:
    print("hourly report")


def main() -> None:
    print(square.submit(7).result(timeout=30))  # 49

    squares = app.map(square, range(100), chunk=50)  # two enqueue requests for 100 tasks
    print(sum(app.results(squares, timeout=30)))  # 328350

    first = checkout.submit({"id": 1, "items": ["pear"]}, key="order-1")
    again = checkout.submit({"id": 1, "items": ["pear"]}, key="order-1")  # same key: the same task
    print(first.result(timeout=30), again.id == first.id)

    try:
        checkout.submit({"id": 2, "items": []}).result(timeout=30)
    except TaskFailed as failure:
        print("failed:", failure.type, failure.remote_message)

    job = app.job()  # a DAG, kept in the broker: restock after both checkouts, notify after restock
    a = job.add(checkout, {"id": 3, "items": ["apple"]})
    b = job.add(checkout, {"id": 4, "items": ["pear", "plum"]})
    stocked = job.add(restock, ["apple", "pear", "plum"], after=[a, b])
    job.add(notify, "shelves are full", after=[stocked])
    print(job.submit().results(timeout=30))

    later = notify.submit("good morning", delay=2)  # not started before 2 s from now
    print(later.status().state, later.result(timeout=30))

    users = ["ada", "grace"]
    # --8<-- [start:batch]
    with app.batch():
        handles = [notify.submit(user) for user in users]
    print(app.results(handles, timeout=60))
    # --8<-- [end:batch]
    app.close()


if __name__ == "__main__":
    main()
