"""The mkdocs hook that writes the generated parts of the site from the code.

A page asks for a part with a marker on a line of its own, `<!-- gen:NAME -->`; this hook replaces
it with the part's Markdown when the page is built. An unknown name, or a marker left over, stops the
build: no page ships with a hole in it. The parts:

* `cli`: every `kittiwake` command's help, walked from the click group (`cli_reference`);
* `broker-options`: the options of `kittiwake broker`, as a table (`cli_reference`);
* `errors`: every error code of `kittiwake.errors` with its class and docstring (`code_reference`);
* `protocol`: every op of the wire protocol with its request fields and reply (`code_reference`);
* `headline`: the headline figures, from the committed benchmark records (`figures`);
* `bench-ops`, `bench-flows`, `bench-cluster`: every figure record of one run's report, as
  `kittiwake bench … --json` wrote it into docs/figures/ (`figures.report_table`).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))

import cli_reference  # noqa: E402
import code_reference  # noqa: E402
import figures  # noqa: E402

PARTS: dict[str, Callable[[], str]] = {
    "cli": cli_reference.all_commands,
    "broker-options": cli_reference.broker_options,
    "errors": code_reference.error_codes,
    "protocol": code_reference.wire_protocol,
    "headline": figures.headline_table,
    **{name: (lambda name=name: figures.report_table(name)) for name in figures.REPORTS},
}

MARKER = re.compile(r"^<!-- gen:([a-z-]+) -->$", re.MULTILINE)
_cache: dict[str, str] = {}


def _part(name: str) -> str:
    if name not in PARTS:
        raise ValueError(f"unknown generated part <!-- gen:{name} -->; known: {', '.join(PARTS)}")
    if name not in _cache:
        _cache[name] = PARTS[name]()
    return _cache[name]


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    return MARKER.sub(lambda match: _part(match.group(1)), markdown)
