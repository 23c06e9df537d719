"""A client: enqueue a task, lease it, then finish it and start the next stage's in one atomic update."""

import kittiwake

with kittiwake.Client() as client:  # the broker at $KITTIWAKE_URL, else kw://127.0.0.1:7370
    client.enqueue("crawl#fetch", b"https://example.com/", pid="https://example.com/")  # dedupe by pid
    for task in client.lease("crawl#fetch", max_tasks=10, lease_secs=60, wait_secs=5):
        page = b"<html>" + task.data + b"</html>"  # what fetching the page would give
        # finish this task and start the next stage's, atomically
        client.update(dequeue=[task], enqueue=[{"queue": "crawl#parse", "pid": task.pid, "data": page}])
    print(client.get("crawl#parse", "https://example.com/").data)
