"""Records as JSON for people's tools: the one rule for task data, shared by the CLI's `--json` and
the broker's HTTP API (`kittiwake.observe`).

Records (msgspec structs, dataclasses, maps) become maps keyed by their Python
attribute names; task data, which is bytes, is its UTF-8 text with
`"data_encoding": "utf-8"` when it decodes, else base64 with
`"data_encoding": "base64"`; other bytes are base64.
"""

from __future__ import annotations

import base64
import dataclasses
from typing import Any

import msgspec


def data_text(data: bytes) -> tuple[str, str]:
    """(text, encoding) of task data: UTF-8 text when it decodes, else base64."""
    try:
        return data.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        return base64.b64encode(data).decode("ascii"), "base64"


def to_json_value(value: Any) -> Any:
    """Records as JSON-ready maps keyed by their Python attribute names (a
    `LeasedTask` shows `expires_at`, not the wire's `lease_expires_at`), task
    data rendered by `data_text`."""
    if isinstance(value, msgspec.Struct):
        return _record({name: getattr(value, name) for name in value.__struct_fields__})
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _record({f.name: getattr(value, f.name) for f in dataclasses.fields(value)})
    if isinstance(value, dict):
        return _record(value)
    if isinstance(value, (list, tuple)):
        return [to_json_value(item) for item in value]
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode("ascii")
    return value


def _record(fields: dict[str, Any]) -> dict[str, Any]:
    rendered = {str(key): to_json_value(item) for key, item in fields.items()}
    data = fields.get("data")
    if isinstance(data, bytes):
        rendered["data"], rendered["data_encoding"] = data_text(data)
    return rendered
