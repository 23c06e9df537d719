"""Python steps on ordinary workers: a flow's `App`, whose join handler runs python step jobs.

``kittiwake worker MODULE:FLOW`` loads the flow's app (`Flow.kittiwake_app`):
it serves ``flow.<name>#steps.python``.
"""

from __future__ import annotations

from typing import Any


def flow_app(flow: Any) -> Any:
    raise NotImplementedError("python steps on kittiwake worker: coming next")
