"""The example of docs/testing-your-code.md runs as written: pytest runs examples/test_with_a_broker.py,
whose fixture starts a real broker with `kittiwake.testing.BrokerProcess`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "test_with_a_broker.py"


def test_the_fixture_example_passes_under_pytest(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pytest", str(EXAMPLE), "-q", "-p", "no:cacheprovider", "--basetemp", str(tmp_path / "run")],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed" in done.stdout
