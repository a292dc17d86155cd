"""The data sources Spark looks up by name:

    spark.dataSource.register(CairnDataSource)
    spark.dataSource.register(CairnChangesDataSource)
    spark.read.format("cairn").option("address", "pod:6648").load()
    df.write.format("cairn").option("address", "pod:6648").mode("append").save()
    spark.readStream.format("cairn-changes").option("address", "pod:6648").load()

Data source objects are pickled to the executors: they hold only options."""

from __future__ import annotations

from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamReader,
)
from pyspark.sql.types import StructType

from cairn.spark.schema import CHANGE_DDL, RECORD_DDL

# The readers and writers (with the client library, gRPC and pyarrow) are imported
# where they are made: Spark asks for the schema in a Python process of its own,
# started afresh each time, which needs none of them.


class CairnDataSource(DataSource):
    """Records: batch read (one partition per shard) and batch write."""

    @classmethod
    def name(cls) -> str:
        return "cairn"

    def schema(self) -> str:
        return RECORD_DDL

    def reader(self, schema: StructType) -> DataSourceReader:
        from cairn.spark.options import ConnectionSettings, ReadSettings
        from cairn.spark.read import CairnPushdownReader, CairnReader

        settings = ReadSettings.of(self.options)
        kind = CairnPushdownReader if settings.pushdown else CairnReader
        return kind(ConnectionSettings.of(self.options), settings)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceArrowWriter:
        from cairn.spark.options import ConnectionSettings, WriteSettings
        from cairn.spark.write import CairnWriter

        return CairnWriter(
            ConnectionSettings.of(self.options), WriteSettings.of(self.options), overwrite
        )


class CairnChangesDataSource(DataSource):
    """Changes: a stream of every record change, from the notification feeds."""

    @classmethod
    def name(cls) -> str:
        return "cairn-changes"

    def schema(self) -> str:
        return CHANGE_DDL

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from cairn.spark.changes import CairnChangeReader
        from cairn.spark.options import ConnectionSettings, ReadSettings, StreamSettings

        return CairnChangeReader(
            ConnectionSettings.of(self.options),
            StreamSettings.of(self.options),
            ReadSettings.of(self.options),
        )
