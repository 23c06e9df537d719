"""The queue engine, sans-IO: queue semantics with the clock and the store injected."""

from kittiwake.engine.engine import DEAD_REASON_HEADER, Engine
from kittiwake.engine.mutations import DeleteTask, DropQueue, Mutation, PutTask, SetLease
from kittiwake.engine.storage import QueueSummary, Recovery, TaskStore

__all__ = [
    "DEAD_REASON_HEADER",
    "Engine",
    "DeleteTask",
    "DropQueue",
    "Mutation",
    "PutTask",
    "SetLease",
    "QueueSummary",
    "Recovery",
    "TaskStore",
]
