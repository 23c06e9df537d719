"""`Flow`: a flow's definition (`definition.FlowDefinition`: steps, ports, wiring) and the calls
that run it — declare its joins, start a run, find runs, and the `App` of its python steps.

The definition knows nothing of brokers and runs; this class joins the two
so a flow's module needs one import (``from kittiwake.flow import Flow``).
"""

from __future__ import annotations

import os
from typing import Any, Mapping

from kittiwake.client.interfaces import QueueClient
from kittiwake.flow.definition import FlowDefinition
from kittiwake.flow.python_steps import flow_app
from kittiwake.flow.records import RunStatus
from kittiwake.flow.runs import RunHandle, attach_run, declare_joins, list_runs, start_run


class Flow(FlowDefinition):
    """A flow: declare steps with `step` and `input`, start runs with `run` (see `FlowDefinition`)."""

    def __init__(self, name: str, **options: Any) -> None:
        super().__init__(name, **options)
        self._app: Any = None

    def declare(self, client: QueueClient) -> dict[str, str]:
        """Declare every step's join in the broker (idempotent); returns join -> created/unchanged/replaced."""
        return declare_joins(self, client)

    def run(
        self, client: QueueClient | str | None, inputs: Mapping[str, object], *, data_dir: str | os.PathLike[str],
        run_id: str | None = None, fresh: bool = False,
    ) -> RunHandle:
        """Start a run: `client` is a `kittiwake.Client` or a broker URL; `inputs` gives a Dataset
        (or an inline value) for each flow input; `data_dir` is where Spark steps write their
        outputs (``<data_dir>/<run id>/<step>/<port>/<sequence indices>``, a path every worker
        can reach). `run_id` makes the start idempotent: a run with that id that exists already
        is returned as it is. Returns a `RunHandle` (id, status(), wait(), outputs(), cancel(),
        retry()). `fresh`: every job runs, none reuses an earlier run's outputs (steps declared
        with ``reuse`` still record theirs: `kittiwake.flow.reuse`)."""
        return start_run(self, client, inputs, data_dir=data_dir, run_id=run_id, fresh=fresh)

    def attach(self, client: QueueClient | str | None, run_id: str) -> RunHandle:
        """A `RunHandle` of an existing run (TaskNotFound when there is none)."""
        return attach_run(self, client, run_id)

    def runs(self, client: QueueClient | str | None, *, limit: int = 100) -> list[RunStatus]:
        """The status of this flow's runs, oldest first, up to `limit`."""
        return list_runs(self, client, limit=limit)

    def kittiwake_app(self) -> Any:
        """The `App` that runs this flow's python steps (``kittiwake worker MODULE:FLOW`` loads it)."""
        if self._app is None:
            self._app = flow_app(self)
        return self._app

    @property
    def app(self) -> Any:
        return self.kittiwake_app()
