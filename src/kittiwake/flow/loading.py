"""Finding a flow by reference: ``module:attribute`` (the attribute defaults to ``flow``), as the
CLI's ``kittiwake spark-worker MODULE:FLOW`` and ``kittiwake flow run MODULE:FLOW`` name it."""

from __future__ import annotations

import importlib
import os
import sys

from kittiwake import errors
from kittiwake.flow.pipeline import Flow


def load_flow(reference: str, sys_path: list[str] | None = None) -> Flow:
    """The Flow at ``module:attribute`` (the working directory and `sys_path` importable)."""
    if not isinstance(reference, str) or not reference or reference.startswith(":"):
        raise errors.BadRequest(f"name a flow as MODULE:ATTRIBUTE, not {reference!r}")
    for entry in reversed([os.getcwd(), *(sys_path or [])]):
        if entry not in sys.path:
            sys.path.insert(0, entry)
    module_name, _, attribute = reference.partition(":")
    module = importlib.import_module(module_name)
    target: object = module
    for part in (attribute or "flow").split("."):
        target = getattr(target, part)
    if not isinstance(target, Flow):
        raise errors.BadRequest(f"{reference} is a {type(target).__name__}, not a kittiwake.flow.Flow")
    return target
