"""Helpers shared by test packages: a broker subprocess and a raw-frame connection (`broker_process`),
the broker's request path in one process without sockets (`socketless_broker`), and the queue checker."""
