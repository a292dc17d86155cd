"""The data sources' options (pure; no Spark session), and that what Spark pickles
to the executors holds settings only."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest
from pyspark.sql.datasource import StringStartsWith
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from cairn.common.tls import TlsFiles
from cairn.spark.changes import CairnChangeReader
from cairn.spark.options import (
    ConnectionSettings,
    OptionError,
    ReadSettings,
    StreamSettings,
    WriteSettings,
)
from cairn.spark.read import CairnPushdownReader
from cairn.spark.write import ShardCounts, WriteReport, summary


def test_connection_options() -> None:
    settings = ConnectionSettings.of({"address": "pod-0:6648", "namespace": "ns"})
    assert (settings.address, settings.namespace) == ("pod-0:6648", "ns")
    assert ConnectionSettings.of({"address": "a:1"}).namespace == "default"
    assert (
        ConnectionSettings.of({"address": "a:1", "requesttimeoutms": "500"}).request_timeout_s
        == 0.5
    )
    with pytest.raises(OptionError, match="address"):
        ConnectionSettings.of({})
    # A token inline would show in Spark's plans and UI: only from a file.
    with pytest.raises(OptionError, match="tokenFile"):
        ConnectionSettings.of({"address": "a:1", "token": "x"})


def test_the_token_file_is_read_where_the_client_is_made(tmp_path: Path) -> None:
    assert ConnectionSettings.of({"address": "a:1"}).client_options().bearer_token is None
    settings = ConnectionSettings.of({"address": "a:1", "tokenfile": str(tmp_path / "token")})
    assert pickle.loads(pickle.dumps(settings)) == settings
    with pytest.raises(OptionError, match="tokenFile"):
        settings.client_options()  # not there yet: read per client, not when parsed
    (tmp_path / "token").write_text("\n")
    with pytest.raises(OptionError, match="holds no token"):
        settings.client_options()
    (tmp_path / "token").write_text("s3cret\n")
    options = settings.client_options()
    assert options.call_metadata() == (("authorization", "Bearer s3cret"),)


def test_tls_options_become_the_clients_tls_files(tmp_path: Path) -> None:
    assert ConnectionSettings.of({"address": "a:1"}).client_options().tls is None
    system_roots = ConnectionSettings.of({"address": "a:1", "tls": "true"})
    assert system_roots.client_options().tls == TlsFiles(None, None, None)
    server_only = ConnectionSettings.of({"address": "a:1", "tlsCaFile": "/c/ca.pem"})
    assert server_only.client_options().tls == TlsFiles(None, None, Path("/c/ca.pem"))
    mutual = ConnectionSettings.of(
        {"address": "a:1", "tlscafile": "ca", "tlsCertFile": "crt", "tlsKeyFile": "key"}
    )
    assert mutual.client_options().tls == TlsFiles(Path("crt"), Path("key"), Path("ca"))
    (tmp_path / "tls.crt").write_text("x")
    directory = ConnectionSettings.of({"address": "a:1", "tlsDir": str(tmp_path)})
    assert directory.client_options().tls == TlsFiles.in_directory(tmp_path)
    assert pickle.loads(pickle.dumps(directory)) == directory
    with pytest.raises(OptionError, match="tlsKeyFile"):
        ConnectionSettings.of({"address": "a:1", "tlsCertFile": "crt"})
    with pytest.raises(OptionError, match="tlsDir"):
        ConnectionSettings.of({"address": "a:1", "tlsDir": "d", "tlsCaFile": "ca"})
    with pytest.raises(OptionError, match="false"):
        ConnectionSettings.of({"address": "a:1", "tls": "false", "tlsCaFile": "ca"})


def test_write_and_read_options() -> None:
    assert WriteSettings.of({}).mode == "upsert"
    assert WriteSettings.of({"writeMode": "create-only"}).mode == "create-only"
    with pytest.raises(OptionError, match="writeMode"):
        WriteSettings.of({"writeMode": "merge"})
    assert ReadSettings.of({"pushdown": "false", "batchRows": "7"}) == ReadSettings(7, False)
    with pytest.raises(OptionError, match="batchRows"):
        ReadSettings.of({"batchRows": "0"})


def test_stream_options() -> None:
    assert StreamSettings.of({}).starting == "latest"
    assert StreamSettings.of({"startingOffsets": "EARLIEST"}).starting == "earliest"
    given = StreamSettings.of({"startingOffsets": '{"0": 5, "3": -1}'})
    assert given.starting == "json" and given.starting_offsets == {"0": 5, "3": -1}
    with pytest.raises(OptionError, match="startingOffsets"):
        StreamSettings.of({"startingOffsets": "[1, 2]"})
    assert StreamSettings.of({"failOnDataLoss": "false"}).fail_on_data_loss is False
    connection = ConnectionSettings.of({"address": "a:1"})
    reader = CairnChangeReader(
        connection, StreamSettings.of({"maxChangesPerTrigger": "10"}), ReadSettings.of({})
    )
    assert reader.getDefaultReadLimit() == ReadMaxRows(10)
    unlimited = CairnChangeReader(connection, StreamSettings.of({}), ReadSettings.of({}))
    assert isinstance(unlimited.getDefaultReadLimit(), ReadAllAvailable)


def test_readers_pickle_with_their_pushed_filters() -> None:
    reader = CairnPushdownReader(ConnectionSettings.of({"address": "a:1"}), ReadSettings.of({}))
    reader.pushFilters([StringStartsWith(("key",), "/a/")])
    copy = pickle.loads(pickle.dumps(reader))
    assert copy.pushed == reader.pushed and copy.connection == reader.connection


def test_write_summary_sums_per_shard() -> None:
    one = WriteReport({0: ShardCounts(2, 20, 1), 1: ShardCounts(1, 5, 0)})
    two = WriteReport({0: ShardCounts(3, 30, 0)})
    assert summary([one, None, two]) == {
        "rows": 6,
        "bytes": 55,
        "conflicts": 1,
        "shards": {
            "0": {"rows": 5, "bytes": 50, "conflicts": 1},
            "1": {"rows": 1, "bytes": 5, "conflicts": 0},
        },
    }


def test_key_prefixes_of_the_change_stream() -> None:
    assert StreamSettings.of({}).key_prefixes == ()
    assert StreamSettings.of({"keyPrefix": "/a/"}).key_prefixes == ("/a/",)
    both = StreamSettings.of({"keyPrefix": "/b/", "keyPrefixes": '["/a/", "/b/"]'})
    assert both.key_prefixes == ("/a/", "/b/")
    # An empty prefix matches every key: no filter.
    assert StreamSettings.of({"keyPrefixes": '["", "/a/"]'}).key_prefixes == ()
    for bad in ("/a/", '{"a": 1}', "[1]"):
        with pytest.raises(OptionError, match="keyPrefixes"):
            StreamSettings.of({"keyPrefixes": bad})
