"""The reference's tables that the code knows best: error codes and the wire protocol.

`error_codes` lists every error class of `kittiwake.errors` with its stable code and its docstring;
`wire_protocol` lists every op of `protocol.messages.REQUEST_TYPES` with its fields (name, type,
default) and the result `protocol.replies.REPLY_TYPES` declares for it, then the reply records.
"""

from __future__ import annotations

import inspect
import typing
from typing import Any

import msgspec

from kittiwake import errors
from kittiwake.protocol import messages, replies


def _first_paragraph(thing: Any) -> str:
    doc = inspect.getdoc(thing) or ""
    return " ".join(doc.split("\n\n")[0].split()).replace("|", "\\|")


def error_codes() -> str:
    classes = [
        value for value in vars(errors).values()
        if inspect.isclass(value) and issubclass(value, errors.KittiwakeError) and value.__module__ == errors.__name__
    ]
    rows = ["| code | class | transient | when |", "| --- | --- | :---: | --- |"]
    for kind in classes:
        if kind in (errors.KittiwakeError, errors.Transient):
            continue
        transient = "yes" if issubclass(kind, errors.Transient) else ""
        rows.append(f"| `{kind.code}` | `kittiwake.errors.{kind.__name__}` | {transient} | {_first_paragraph(kind)} |")
    codes = sorted(errors.ALL_CODES)
    return (
        "\n".join(rows)
        + f"\n\nEvery code: {', '.join(f'`{code}`' for code in codes)}. `KittiwakeError` (code `INTERNAL` when raised "
        "itself) is the root of the tree and `Transient` the parent of the transient ones.\n"
    )


def _type_name(kind: Any) -> str:
    if isinstance(kind, type):
        return kind.__name__
    text = repr(kind).replace("typing.", "").replace("kittiwake.model.", "").replace("kittiwake.protocol.replies.", "")
    return text.replace("kittiwake.join_spec.", "").replace("NoneType", "None")


def _fields(struct: type[msgspec.Struct], skip: tuple[str, ...] = ()) -> str:
    hints = typing.get_type_hints(struct)
    shown = []
    for field in msgspec.structs.fields(struct):
        if field.name in skip:
            continue
        default = field.default
        if default is msgspec.NODEFAULT and field.default_factory is not msgspec.NODEFAULT:
            default = field.default_factory()
        suffix = "" if default is msgspec.NODEFAULT else f" = {default!r}"
        shown.append(f"`{field.encode_name}`: {_type_name(hints[field.name])}{suffix}")
    return ", ".join(shown).replace("|", "\\|") or "—"


def wire_protocol() -> str:
    rows = ["| op | request fields (besides `id`, `op`) | result | notes |", "| --- | --- | --- | --- |"]
    records: dict[str, type[msgspec.Struct]] = {}
    for op, request in messages.REQUEST_TYPES.items():
        result = replies.REPLY_TYPES.get(op)
        for kind in (result, *typing.get_args(result)):
            if isinstance(kind, type) and issubclass(kind, msgspec.Struct):
                records[kind.__name__] = kind
        rows.append(f"| `{op}` | {_fields(request, ('id', 'op'))} | {_type_name(result).replace('|', chr(92) + '|')} | "
                    f"{_first_paragraph(request) if request.__doc__ else ''} |")
    for name in ("TaskIn", "LeaseRefIn"):
        records.setdefault(name, getattr(messages, name))
    record_rows = ["| record | fields |", "| --- | --- |"]
    for name, kind in sorted(records.items()):
        record_rows.append(f"| `{name}` | {_fields(kind)} |")
    return "\n".join(rows) + "\n\nRecords in requests and results:\n\n" + "\n".join(record_rows) + "\n"
