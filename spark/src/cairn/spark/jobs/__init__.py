"""The jobs on the `cairn` data source, each a console script and a module file
that `spark-submit` runs as it is: cairn-export, cairn-restore, cairn-cdc."""
