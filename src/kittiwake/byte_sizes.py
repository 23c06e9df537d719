"""Sizes in bytes written for people: `300MB`, `1.5 GB`, `800kB`, `4096`.

Decimal units (1 kB = 1000 bytes, 1 MB = 10**6, 1 GB = 10**9), case-insensitive,
with or without the trailing `B`. The commands that take a size (`kittiwake demo
--size`, `kittiwake gen-data --size`) parse it here, each adding its own bounds.
"""

from __future__ import annotations

import re

from kittiwake.errors import BadRequest

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmg]?b?)\s*$", re.IGNORECASE)
_UNITS = {"": 1, "b": 1, "k": 10**3, "kb": 10**3, "m": 10**6, "mb": 10**6, "g": 10**9, "gb": 10**9}


def parse_byte_size(text: str | int) -> int:
    """Bytes from `300MB`, `1.5GB`, `800kB` or a plain number of bytes (decimal units).

    Raises BadRequest for anything else, a negative number among it."""
    if isinstance(text, bool) or not isinstance(text, (str, int)):
        raise BadRequest(f"a size is a string such as '10MB' or a number of bytes, not {text!r}")
    if isinstance(text, int):
        if text < 0:
            raise BadRequest(f"a size cannot be negative: {text}")
        return text
    match = _SIZE.match(text)
    if not match:
        raise BadRequest(f"a size is a number with an optional unit (B, kB, MB, GB), not {text!r}")
    return int(float(match.group(1)) * _UNITS[match.group(2).lower()])
