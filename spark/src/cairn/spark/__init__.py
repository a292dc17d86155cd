"""Cairn on Spark: the `cairn` data source (records: batch read and write) and the
`cairn-changes` data source (the change stream); the jobs in `cairn.spark.jobs`."""

from cairn.common.version import distribution_version
from cairn.spark.source import CairnChangesDataSource, CairnDataSource

__all__ = ["DISTRIBUTION", "CairnChangesDataSource", "CairnDataSource", "__version__"]

DISTRIBUTION = "cairn-kv-spark"
__version__ = distribution_version(DISTRIBUTION)
