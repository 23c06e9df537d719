"""`KittiwakeDataSource`: the `kittiwake` format of PySpark's Python Data Source API.

Spark instantiates the class with the query's options wherever it needs it
(a planning process on the driver, the executors) and asks it for the
schema, a batch reader, a writer or a stream reader; each checks the options
of its use (`options`) before anything runs, so a bad option fails the query
at once with `BadRequest` and a message that names it.
"""

from __future__ import annotations

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, DataSourceWriter
from pyspark.sql.types import StructType

from kittiwake import errors
from kittiwake.spark import options as spark_options
from kittiwake.spark.batch_reader import BatchReader
from kittiwake.spark.rows import SCHEMA_DDL, check_schema
from kittiwake.spark.stream_reader import StreamReader
from kittiwake.spark.writer import Writer, check_columns

FORMAT = "kittiwake"


class KittiwakeDataSource(DataSource):
    """Tasks of a Kittiwake broker as rows: read (peek), write (enqueue), stream (lease, dequeue)."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> str:
        spark_options.url_of(self.options)  # every use needs it: fail at load(), not at the first action
        return SCHEMA_DDL

    def reader(self, schema: StructType) -> DataSourceReader:
        check_schema(schema)
        return BatchReader(spark_options.read_options(self.options))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        if overwrite:
            raise errors.BadRequest("the kittiwake sink only adds tasks: use mode('append'), not 'overwrite'")
        options = spark_options.write_options(self.options)
        return Writer(options, check_columns(schema, options))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        check_schema(schema)
        return StreamReader(spark_options.stream_options(self.options))
