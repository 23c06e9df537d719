"""Stores: how engine mutations become durable and come back after a restart.

`memory.MemoryStore` is the in-memory twin used by engine tests and by users'
own tests; `sqlite.SqliteStore` is the embedded default. Both satisfy
`kittiwake.engine.storage.TaskStore` and pass one contract suite.
"""
