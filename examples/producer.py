"""A batching producer: a thousand enqueues in a few durable requests; `sent()` waits for one task."""

import kittiwake

urls = [f"https://example.com/{n}" for n in range(1000)]

with kittiwake.Client() as client:  # the broker at $KITTIWAKE_URL, else kw://127.0.0.1:7370
    with client.producer() as producer:
        for url in urls:
            producer.enqueue("crawl#fetch", url, pid=url)  # returns at once; the options of enqueue
        sending = producer.enqueue("emails", b"welcome")
        outcome = sending.sent(timeout=5)  # once durable: the EnqueueOutcome, or the broker's error
    # leaving the block flushed: every task is durable, or the first failure was raised
    print(outcome.queue, client.stats("crawl#fetch")[0].size)  # emails 1000
