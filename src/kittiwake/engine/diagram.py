"""docs/task-states.md, drawn from the transition table: `python -m kittiwake.engine.diagram > docs/task-states.md`.

A mermaid state diagram (one arrow per pair of states, labelled with every
operation that takes it) and the table itself as a list. Text in, text out;
only running the module prints it.
"""

from __future__ import annotations

from kittiwake.engine.transitions import INITIAL, TRANSITIONS
from kittiwake.model import TaskState


def state_diagram() -> str:
    """docs/task-states.md: the table as a mermaid state diagram, then as a list."""
    edges: dict[tuple[TaskState, TaskState], list[str]] = {}
    for state, row in TRANSITIONS.items():
        for operation, targets in row.items():
            for target in sorted(targets, key=list(TaskState).index):
                edges.setdefault((state, target), []).append(operation.value)
    lines = [
        "# Task states",
        "",
        "<!-- Generated from src/kittiwake/engine/transitions.py by",
        "     `python -m kittiwake.engine.diagram > docs/task-states.md`; do not edit. -->",
        "",
        "Every state a task can be in, and every operation that moves it (the theory of operation",
        "is the comment above `TRANSITIONS` in `src/kittiwake/engine/transitions.py`). A task starts",
        "gone: it does not exist until it is enqueued. Self-loops are operations that act on a task",
        "and leave it where it was.",
        "",
        "```mermaid",
        "stateDiagram-v2",
        f"    [*] --> {INITIAL.value}",
    ]
    for (state, target), operations in edges.items():
        lines.append(f"    {state.value} --> {target.value}: {', '.join(operations)}")
    lines += ["```", "", "| state | operation | leads to |", "| --- | --- | --- |"]
    for state, row in TRANSITIONS.items():
        for operation, targets in row.items():
            names = ", ".join(target.value for target in sorted(targets, key=list(TaskState).index))
            lines.append(f"| {state.value} | {operation.value} | {names} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(state_diagram(), end="")
