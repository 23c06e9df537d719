"""`Dataset`: what a token carries — a reference to data (a URI of Parquet, CSV or text, a plain
path) or a small value inline.

The multi-queue's token messages point at a data set rather than hold it
(multi-queue §III, "CDataSet"): the bytes stay where they are written and
only the reference travels through the broker. Small values may travel
inline (msgpack-able, within the broker's 1 MiB task limit together with
the rest of the token).

A dataset is immutable and plain data on the wire: ``{"kind", "uri",
"value", "options"}``. Kind ``fused`` is the workers' own: the output of a
step declared ``fuse="plan"``, never written, its value the recipe a Spark
consumer builds it from (`kittiwake.flow.plan_fusion`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from kittiwake import errors

FUSED_KIND = "fused"  # a plan-fused step's output: a recipe, never written (`plan_fusion`)
KINDS = ("parquet", "csv", "text", "path", "inline", FUSED_KIND)
URI_KINDS = ("parquet", "csv", "text", "path")


@dataclass(frozen=True, slots=True)
class Dataset:
    """A reference to data: `kind` is parquet, csv, text, path (a file or folder, read by your
    own code) or inline (`value` is the data itself)."""

    kind: str
    uri: str | None = None
    value: Any = None
    options: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise errors.BadRequest(f"dataset kind must be one of {', '.join(KINDS)}, not {self.kind!r}")
        if self.kind in URI_KINDS:
            if not isinstance(self.uri, str) or not self.uri:
                raise errors.BadRequest(f"a {self.kind} dataset needs a uri (a non-empty string)")
        elif self.uri is not None:
            raise errors.BadRequest(f"a dataset of kind {self.kind} has a value, not a uri")
        if not isinstance(self.options, Mapping):
            raise errors.BadRequest("dataset options must be a mapping")

    # ------------------------------------------------------------ builders

    @classmethod
    def parquet(cls, uri: str | os.PathLike[str], *, schema: Any = None) -> Dataset:
        """Parquet files at `uri` (a file or a folder of parts; a local path, made absolute, or any
        URI Spark reads: file:, hdfs://, s3a://, ...). `schema` (a pyspark StructType, its JSON or
        a DDL string) lets a Spark step read it without the job Spark runs to infer a schema."""
        if schema is None:
            return cls("parquet", _uri(uri))
        return cls("parquet", _uri(uri), options={SCHEMA_OPTION: schema_text(schema)})

    @classmethod
    def csv(cls, uri: str | os.PathLike[str], *, header: bool = True, **options: Any) -> Dataset:
        """CSV at `uri`; `header` and any other options go to Spark's CSV reader."""
        return cls("csv", _uri(uri), options={"header": header, **options})

    @classmethod
    def text(cls, uri: str | os.PathLike[str]) -> Dataset:
        """Text at `uri`, one row per line (Spark: a DataFrame with one column, `value`)."""
        return cls("text", _uri(uri))

    @classmethod
    def path(cls, uri: str | os.PathLike[str]) -> Dataset:
        """A file or folder your own code reads (a Spark step reads it as Parquet)."""
        return cls("path", _uri(uri))

    @classmethod
    def inline(cls, value: Any) -> Dataset:
        """A small msgpack-able value carried in the token itself (a Spark step gets a DataFrame
        of it when it is a list of rows — dicts — and the value itself otherwise)."""
        return cls("inline", None, value)

    # ------------------------------------------------------------- reading

    @property
    def local_path(self) -> Path:
        """The URI as a local path (``file://`` stripped); BadRequest for a dataset without a URI
        (inline, fused)."""
        if self.uri is None:
            raise errors.BadRequest(f"a dataset of kind {self.kind} has no path")
        uri = self.uri
        if uri.startswith("file://"):
            uri = uri[len("file://"):]
        return Path(uri)

    def to_wire(self) -> dict[str, Any]:
        return {"kind": self.kind, "uri": self.uri, "value": self.value, "options": dict(self.options)}

    @classmethod
    def from_wire(cls, raw: Any) -> Dataset:
        if isinstance(raw, Dataset):
            return raw
        if not isinstance(raw, Mapping) or "kind" not in raw:
            raise errors.BadRequest(f"not a dataset: {raw!r:.200}")
        return cls(raw["kind"], raw.get("uri"), raw.get("value"), dict(raw.get("options") or {}))

    def __repr__(self) -> str:
        if self.kind == "inline":
            return f"Dataset.inline({self.value!r:.60})"
        if self.kind == FUSED_KIND:
            return f"<fused output of {self.value.get('step') if isinstance(self.value, Mapping) else '?'}>"
        return f"Dataset.{self.kind}({self.uri!r})"


SCHEMA_OPTION = "schema"


def schema_text(schema: Any) -> str:
    """A schema as a token carries it: a StructType's JSON, or the JSON or DDL string given."""
    if isinstance(schema, str) and schema.strip():
        return schema
    if callable(getattr(schema, "json", None)):
        return str(schema.json())
    raise errors.BadRequest(f"a schema is a pyspark StructType, its JSON or a DDL string, not {schema!r:.80}")


def _uri(uri: str | os.PathLike[str]) -> str:
    """A URI as given; a local path made absolute (workers run in other directories)."""
    if isinstance(uri, os.PathLike):
        uri = os.fspath(uri)
    if not isinstance(uri, str) or not uri:
        raise errors.BadRequest(f"a dataset uri must be a non-empty string or path, not {uri!r}")
    return uri if "://" in uri or uri.startswith("file:") else os.path.abspath(uri)


def as_dataset(value: Any) -> Dataset:
    """A step's returned value as a dataset: a Dataset as it is, anything else inline."""
    return value if isinstance(value, Dataset) else Dataset.inline(value)
