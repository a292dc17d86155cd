"""What the jobs share: the connection arguments (the data sources' options),
and a Spark session made for a job.

A job run as a console script makes its own session (local[*] unless --master);
under spark-submit, the master and everything else come from spark-submit."""

from __future__ import annotations

import argparse
from typing import Any

from cairn.spark.options import ConnectionSettings


def add_connection_arguments(
    parser: argparse.ArgumentParser, role: str = "", required: bool = True
) -> None:
    """--address, --namespace, the TLS files and the token file (`role`: a prefix,
    e.g. "source-")."""
    parser.add_argument(
        f"--{role}address", required=required, help="any storage pod's client address, host:port"
    )
    parser.add_argument(f"--{role}namespace", default="default")
    parser.add_argument(
        f"--{role}tls-dir",
        help="TLS: a directory in cert-manager's layout (ca.crt; tls.crt/tls.key for a "
        "client certificate); it must exist on the driver and every executor",
    )
    parser.add_argument(f"--{role}tls-ca-file", help="TLS: the CA to check the servers by")
    parser.add_argument(f"--{role}tls-cert-file", help="TLS: a client certificate")
    parser.add_argument(f"--{role}tls-key-file", help="TLS: the client certificate's key")
    parser.add_argument(
        f"--{role}token-file",
        help="a file holding the bearer token to send (with auth on); it must exist on the "
        "driver and every executor",
    )


def connection_options(args: argparse.Namespace, role: str = "") -> dict[str, str]:
    """The data source options the arguments stand for."""
    prefix = role.replace("-", "_")
    names = {
        "address": "address",
        "namespace": "namespace",
        "tls_dir": "tlsDir",
        "tls_ca_file": "tlsCaFile",
        "tls_cert_file": "tlsCertFile",
        "tls_key_file": "tlsKeyFile",
        "token_file": "tokenFile",
    }
    options = {}
    for attribute, option in names.items():
        value = getattr(args, prefix + attribute)
        if value is not None:
            options[option] = str(value)
    ConnectionSettings.of(options)  # bad combinations fail here, before Spark starts
    return options


def add_spark_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--master",
        help="Spark master when run as a console script (default local[*]); under "
        "spark-submit, give --master to spark-submit instead",
    )


def job_session(app_name: str, master: str | None) -> Any:
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app_name)
    if master:
        builder = builder.master(master)
    session = (
        builder.config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.python.filterPushdown.enabled", "true")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("WARN")
    register(session)
    return session


def register(spark: Any) -> None:
    from cairn.spark import CairnChangesDataSource, CairnDataSource

    spark.dataSource.register(CairnDataSource)
    spark.dataSource.register(CairnChangesDataSource)
