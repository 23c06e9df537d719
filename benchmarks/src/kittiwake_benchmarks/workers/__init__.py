"""`kittiwake bench workers`: what a user of `@app.task` and `kittiwake worker` gets, with default flags.

* `run`: the benchmark — each figure on a fresh broker, with real `kittiwake worker` commands.
* In the wheel, shared with `bench cluster`'s user path: `kittiwake.bench.user_app` (the app the
  workers load and the submitter imports: null, kept-result and sleeping tasks) and
  `kittiwake.bench.map_submitter` (the submitting side, one `app.map` call, in a process of its own).
* `slots`: each worker slot's timeline rebuilt from the tally: efficiency, idle while waiting (sans-IO).
* `show`: the table and the chart.
"""
