"""Cairn on Spark: the `cairn` data source (records: batch read and write) and the
`cairn-changes` data source (the change stream); the jobs in `cairn.spark.jobs`."""

from cairn.spark.source import CairnChangesDataSource, CairnDataSource

__all__ = ["CairnChangesDataSource", "CairnDataSource"]
