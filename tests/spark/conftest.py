"""One Spark session for every Spark test of the run: its start-up takes 15-35 s
here (more on a loaded machine), so it is paid once; tests keep apart by their own
servers or key prefixes."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from cairn.spark import CairnChangesDataSource, CairnDataSource


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    # The executors' Python workers run this interpreter (with the workspace's
    # packages), and nothing listens beyond loopback.
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2]")
        .appName("cairn-spark-tests")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        # The JVM does little here besides starting up (the data source's work is in
        # Python): C1 only and the serial collector start it in about 10 s instead of
        # 18 s on this machine.
        .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        # Python workers connect back to the JVM; on a machine loaded by other test
        # processes the default 15 s was seen to run out.
        .config("spark.python.authenticate.socketTimeout", "120s")
        # Needed by any reader with pushFilters (Spark refuses its reads otherwise).
        .config("spark.sql.python.filterPushdown.enabled", "true")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    session.dataSource.register(CairnDataSource)
    session.dataSource.register(CairnChangesDataSource)
    try:
        yield session
    finally:
        session.stop()
