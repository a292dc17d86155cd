"""Cairn on Spark: the `cairn` data source (cairn.spark.source) and the jobs built on it."""
