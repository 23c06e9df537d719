"""What `pyproject.toml` tells setuptools to ship must exist: a package-data glob that matches
nothing is a promise the wheel does not keep (and hides a file that went missing)."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_every_package_data_pattern_matches_a_file() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    package_data = project["tool"]["setuptools"]["package-data"]
    source = ROOT / project["tool"]["setuptools"]["packages"]["find"]["where"][0]
    unmatched = [
        f"{package}: {pattern}"
        for package, patterns in package_data.items()
        for pattern in patterns
        if not any((source / package.replace(".", "/")).glob(pattern))
    ]
    assert not unmatched, f"package-data patterns that match no file: {', '.join(unmatched)}"
