"""The broker's own benchmarks, run from the CLI (`kittiwake bench ops | latency | scale | producer | udp | cluster`).

Each benchmark starts its own broker subprocess on a throwaway directory,
drives it from separate load processes, prints a table, and writes JSON in
one stable shape (`report`). The figures are compared with the seeds' —
TaskMaster §6 Table 1 and §5.3–5.4, Fabriq's push latency — and with the
targets of the benchmarks (`references`). The benchmarks of other systems
(`tasks`, `peers`, `celery`, `workers`, `flows`, `mapreduce`, `sqs`,
`dashboard`) are a distribution of their own on this harness, found
through entry points (`distribution`).

* `settings`: every default, declared once (the CLI's options read them too).
* `commands`, `command_options`: the click commands and the options they share; `cluster` holds its own.
* `wire`: the one raw connection `ops`, `latency` and `scale` speak the protocol through.
* `harness`: broker process, load process pool, measurement windows, percentiles.
* `jobs`: the plain data sent to load processes and back.
* `load`: what runs inside a load process (closed-loop connections on raw frames).
* `probes`: sequential probes in a load process (long-poll wake-up, the disk's fsync).
* `processes`: spawning, serving and stopping helper processes.
* `ops`, `latency`, `scale`, `producer`, `udp_loss` (with `udp_relay`), `cluster`: one benchmark each.
* `report`: machine facts, figure records, tables, JSON, CDF plot.
* `cold_restart`: `scale`'s restart over millions of tasks written straight through the store.
* `bench_store`: a benchmark's broker on a store URL (SQLite, PostgreSQL) that must hold no task.
* The user path, shared with the benchmarks distribution: `user_app` (the app `kittiwake worker`
  runs), `map_submitter` (`app.map` from a process of its own), `worker_group` (worker commands as
  subprocesses), `tally` (the null task, its payload and the record each run leaves).
"""
