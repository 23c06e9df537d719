"""The group-commit pass and its policy are pure, and no broker module knows which database the
store is: checked on the source itself, as `tests/engine/test_sans_io.py` checks the engine."""

from __future__ import annotations

from pathlib import Path

import pytest

import kittiwake.broker
from engine.test_sans_io import imported_modules

BROKER_DIR = Path(kittiwake.broker.__file__).parent
# one pass, what it holds and says, its long-polls, the outage policy, the long-poll book, requests to engine
# calls, the UDP retransmit window, the budgets every port shares, the HTTP ports' host names
PURE = ["passes.py", "pass_replies.py", "long_polls.py", "store_health.py", "waiters.py", "dispatch.py",
        "udp/retransmit_window.py", "connection_slots.py", "read_budget.py", "http_hosts.py"]
IO = {"time", "asyncio", "socket", "ssl", "selectors", "threading", "sqlite3", "os", "uvloop"}


@pytest.mark.parametrize("name", PURE)
def test_the_pass_takes_its_clocks_and_does_no_io(name: str) -> None:
    modules = imported_modules((BROKER_DIR / name).read_text(encoding="utf-8"))
    bad = {module for module in modules if module.split(".")[0] in IO or module == "__import__"}
    assert not bad, f"{name} imports {sorted(bad)}"
    assert "kittiwake.broker.connection" not in modules and "kittiwake.broker.group_commit" not in modules


@pytest.mark.parametrize("path", sorted(BROKER_DIR.rglob("*.py")), ids=lambda path: str(path.relative_to(BROKER_DIR)))
def test_no_broker_module_imports_sqlite3(path: Path) -> None:
    """Stores raise `errors.StorageFailure` for their own database's errors (`store.faults`)."""
    modules = imported_modules(path.read_text(encoding="utf-8"))
    assert not {module for module in modules if module.split(".")[0] == "sqlite3" or module == "kittiwake.store.faults"}
