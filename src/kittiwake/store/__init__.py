"""Stores: how engine mutations become durable and come back after a restart.

`memory.MemoryStore` is the in-memory twin used by engine tests and by users'
own tests; `sqlite.SqliteStore` is the embedded default; `postgres.PostgresStore`
keeps the same tables in a PostgreSQL schema. All satisfy
`kittiwake.engine.storage.TaskStore` and pass one contract suite;
`location` opens the store a URL names (`kittiwake broker --store`), and
`directory_lock` keeps an SQLite directory to one broker, copy or migrate.
"""
