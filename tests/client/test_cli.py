"""The `cairn` command line against a real standalone server process: every
subcommand, versions, partition keys, exit codes; `status` with and without a
controller (with one: a local cluster, as in tests/e2e/test_controller.py)."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from cairn.client import cli
from cairn.common.hashing import key_hash
from support.processes import StandaloneProcess

# A port nothing listens on, for "no controller here" (bound and closed at once
# would race with other tests; a port in the reserved range below 1024 that no test
# machine serves HTTP on is steadier).
NO_CONTROLLER_URL = "http://127.0.0.1:9"
SUBPROCESS_TIMEOUT_S = 60.0


@dataclass
class Result:
    code: int
    stdout: bytes
    stderr: str

    @property
    def text(self) -> str:
        return self.stdout.decode("utf-8")

    def json(self) -> Any:
        return json.loads(self.stdout)

    def json_lines(self) -> list[Any]:
        return [json.loads(line) for line in self.text.splitlines()]


class Cli:
    """Runs `cairn` in this process against one server."""

    def __init__(self, address: str) -> None:
        self.address = address

    def __call__(self, *argv: str, stdin: bytes | None = None) -> Result:
        out_bytes = io.BytesIO()
        stdout = io.TextIOWrapper(out_bytes, encoding="utf-8", write_through=True)
        stderr = io.StringIO()
        stdin_stream = io.TextIOWrapper(io.BytesIO(stdin or b""), encoding="utf-8")
        env = {"CAIRN_ADDRESS": self.address, "CAIRN_ADMIN_URL": NO_CONTROLLER_URL}
        code = cli.main(
            ["--timeout-s", "10", *argv],
            env=env,
            stdin=stdin_stream,
            stdout=stdout,
            stderr=stderr,
        )
        stdout.flush()
        return Result(code, out_bytes.getvalue(), stderr.getvalue())

    def ok(self, *argv: str, stdin: bytes | None = None) -> Result:
        result = self(*argv, stdin=stdin)
        assert result.code == 0, result.stderr
        return result


@pytest.fixture
def server(standalone_factory: Callable[..., StandaloneProcess]) -> StandaloneProcess:
    return standalone_factory(2)


@pytest.fixture
def run(server: StandaloneProcess) -> Cli:
    return Cli(server.address)


def test_put_and_get_from_argument_file_and_stdin(run: Cli, tmp_path: Path) -> None:
    assert run.ok("put", "/a/arg", "from argument").text.startswith("/a/arg version ")
    value_file = tmp_path / "value.bin"
    binary = bytes(range(256))
    value_file.write_bytes(binary)
    run.ok("put", "/a/file", "--value-file", str(value_file))
    run.ok("put", "/a/stdin", stdin=b"from stdin")

    assert run.ok("get", "/a/arg").stdout == b"from argument"
    assert run.ok("get", "/a/file").stdout == binary
    assert run.ok("get", "/a/stdin").stdout == b"from stdin"

    document = run.ok("get", "/a/arg", "--json").json()
    assert document["key"] == "/a/arg"
    assert document["value"] == "from argument"
    assert document["version"]["modifications_count"] == 0
    # Bytes that are not UTF-8 come back in base64.
    assert "value" not in run.ok("get", "/a/file", "--json").json()
    assert run.ok("get", "/a/file", "--json").json()["value_base64"]
    # Global options also work after the command.
    assert run.ok("get", "/a/stdin", "--namespace", "default").stdout == b"from stdin"


def test_versions_and_exit_codes(run: Cli) -> None:
    created = run.ok("put", "/v/k", "one", "--expected-version", "-1", "--json").json()
    version = created["version"]["version_id"]
    # Create-only again: the record exists.
    conflict = run("put", "/v/k", "two", "--expected-version", "-1")
    assert conflict.code == cli.EXIT_UNEXPECTED_VERSION
    assert "version" in conflict.stderr
    assert run("put", "/v/k", "two", "--expected-version", str(version + 1000)).code == 3
    updated = run.ok("put", "/v/k", "two", "--expected-version", str(version), "--json").json()
    assert updated["version"]["modifications_count"] == 1
    assert run("delete", "/v/k", "--expected-version", str(version)).code == 3
    run.ok("delete", "/v/k", "--expected-version", str(updated["version"]["version_id"]))

    missing = run("get", "/v/k")
    assert missing.code == cli.EXIT_NOT_FOUND
    assert "no such record" in missing.stderr
    assert run("delete", "/v/k").code == cli.EXIT_NOT_FOUND


def test_usage_errors_exit_2(run: Cli, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    value_file = tmp_path / "v"
    value_file.write_bytes(b"x")
    both = run("put", "/u", "arg", "--value-file", str(value_file))
    assert both.code == cli.EXIT_USAGE
    assert "not both" in both.stderr
    assert run("put", "/u", "--value-file", str(tmp_path / "absent")).code == 2
    assert run("put", "/u", "v", "--index", "no-equals-sign").code == 2
    assert run("list", "/", "//", "--limit", "-1").code == 2
    assert run("watch", "--from", "zero=1").code == 2
    # A sequence put without a partition key is refused before anything is sent.
    assert run("put", "/s", "v", "--sequence-key-delta", "1").code == 2
    with pytest.raises(SystemExit) as raised:
        run("get")
    assert raised.value.code == 2
    with pytest.raises(SystemExit) as raised:
        run("perf", "--batching", "sometimes")
    assert raised.value.code == 2
    assert run("perf", "--concurrency", "0").code == 2
    capsys.readouterr()


def test_unreachable_server_and_unknown_namespace() -> None:
    unreachable = Cli("127.0.0.1:9")("--timeout-s", "0.5", "get", "/k")
    assert unreachable.code == cli.EXIT_UNAVAILABLE
    assert unreachable.stderr


def test_perf_without_the_bench_distribution_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The client installed alone (cairn-kv-bench absent, as a None in sys.modules
    makes it): `cairn perf` is still listed, and running it, with any flags, is a
    usage error naming the distribution."""
    for name in [n for n in sys.modules if n == "cairn.bench" or n.startswith("cairn.bench.")]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, "cairn.bench", None)
    with pytest.raises(SystemExit) as raised:
        cli.main(["--help"])
    assert raised.value.code == 0
    assert "perf" in capsys.readouterr().out
    absent = Cli("127.0.0.1:9")
    for argv in (("perf",), ("perf", "--concurrency", "64", "--rate", "100"), ("perf", "--json")):
        result = absent(*argv)
        assert result.code == cli.EXIT_USAGE, argv
        assert "pip install cairn-kv-bench" in result.stderr, result.stderr
        assert result.stdout == b""
    # Flags no command knows are still refused everywhere else.
    with pytest.raises(SystemExit) as raised:
        absent("get", "/k", "--concurrency", "64")
    assert raised.value.code == cli.EXIT_USAGE


def test_unknown_namespace_exits_5(run: Cli) -> None:
    result = run("--namespace", "absent", "get", "/k")
    assert result.code == cli.EXIT_FAILED
    assert "absent" in result.stderr


def _keys_on_other_shards(run: Cli, partition_key: str) -> list[str]:
    """Keys whose own hash routes to a shard other than the partition key's."""
    view = run.ok("status", "--json").json()
    ranges = [shard["hash_range"] for shard in view["shards"]]

    def shard_of(key: str) -> int:
        routing = key_hash(key)
        return next(i for i, (low, high) in enumerate(ranges) if low <= routing <= high)

    target = shard_of(partition_key)
    return [key for key in (f"/p/{i}" for i in range(100)) if shard_of(key) != target][:3]


def test_partition_keys_route_every_call_to_one_shard(run: Cli) -> None:
    keys = _keys_on_other_shards(run, "tenant-7")
    assert keys
    for key in keys:
        run.ok("put", key, f"v{key}", "--partition-key", "tenant-7")
    for key in keys:
        assert run.ok("get", key, "--partition-key", "tenant-7").stdout == f"v{key}".encode()
        # Without the partition key the call goes to the key's own shard: not there.
        assert run("get", key).code == cli.EXIT_NOT_FOUND
    listed = run.ok("list", "/p/", "/p//", "--partition-key", "tenant-7").text.split()
    assert listed == sorted(keys)
    # Without one, a list asks every shard: the same keys.
    assert run.ok("list", "/p/", "/p//").text.split() == sorted(keys)
    run.ok("delete", keys[0], "--partition-key", "tenant-7")
    run.ok("delete-range", "/p/", "/p//", "--partition-key", "tenant-7")
    assert run.ok("list", "/p/", "/p//", "--partition-key", "tenant-7").text == ""


def test_sequence_keys(run: Cli) -> None:
    first = run.ok(
        "put", "/seq/a", "x", "--partition-key", "s", "--sequence-key-delta", "1", "--json"
    ).json()
    second = run.ok(
        "put", "/seq/a", "y", "--partition-key", "s", "--sequence-key-delta", "1", "--json"
    ).json()
    assert first["key"] == "/seq/a-00000000000000000001"
    assert second["key"] == "/seq/a-00000000000000000002"
    assert run.ok("get", second["key"], "--partition-key", "s").stdout == b"y"


def test_list_range_delete_range_and_comparisons(run: Cli) -> None:
    for name in ("b", "a", "c", "d"):
        run.ok("put", f"/r/{name}", f"value {name}")
    run.ok("put", "/r/a/child", "deeper")
    assert run.ok("list", "/r/", "/r//").text.split() == ["/r/a", "/r/b", "/r/c", "/r/d"]
    assert run.ok("list", "/r/", "/r//", "--limit", "2").text.split() == ["/r/a", "/r/b"]
    assert [line["key"] for line in run.ok("list", "/r/", "/r//", "--json").json_lines()] == [
        "/r/a",
        "/r/b",
        "/r/c",
        "/r/d",
    ]
    lines = run.ok("range", "/r/b", "/r/d").text.splitlines()
    assert lines == ["/r/b\tvalue b", "/r/c\tvalue c"]
    records = run.ok("range", "/r/", "/r//", "--json").json_lines()
    assert [(r["key"], r["value"]) for r in records][:1] == [("/r/a", "value a")]
    assert all(r["version"]["version_id"] >= 0 for r in records)

    assert run.ok("get", "/r/bb", "--comparison", "floor", "--json").json()["key"] == "/r/b"
    assert run.ok("get", "/r/bb", "--comparison", "ceiling", "--json").json()["key"] == "/r/c"
    assert run.ok("get", "/r/c", "--comparison", "lower", "--json").json()["key"] == "/r/b"
    assert run.ok("get", "/r/c", "--comparison", "higher", "--json").json()["key"] == "/r/d"
    no_value = run.ok("get", "/r/c", "--no-value", "--json").json()
    assert "value" not in no_value and no_value["key"] == "/r/c"

    run.ok("delete-range", "/r/b", "/r/d")
    assert run.ok("list", "/r/", "/r//").text.split() == ["/r/a", "/r/d"]


def test_secondary_indexes(run: Cli) -> None:
    run.ok("put", "/users/1", "ann", "--index", "by-name=ann", "--index", "by-team=red")
    run.ok("put", "/users/2", "bob", "--index", "by-name=bob", "--index", "by-team=red")
    found = run.ok("get", "bob", "--index", "by-name", "--json").json()
    assert found["key"] == "/users/2"
    assert found["secondary_index_key"] == "bob"
    assert run.ok("list", "a", "z", "--index", "by-name").text.split() == ["/users/1", "/users/2"]
    assert [
        r["value"] for r in run.ok("range", "r", "s", "--index", "by-team", "--json").json_lines()
    ] == [
        "ann",
        "bob",
    ]


def test_status_without_a_controller_shows_the_shard_map_and_counters(run: Cli) -> None:
    before = run.ok("status", "--json").json()
    assert before["source"] == "storage"
    assert [s["shard"] for s in before["shards"]] == [0, 1]
    operations_before = sum(s["status"]["write_operations"] for s in before["shards"])
    gets_before = sum(s["status"]["read_gets"] for s in before["shards"])
    for i in range(5):
        run.ok("put", f"/st/{i}", "v")
    run.ok("get", "/st/0")
    after = run.ok("status", "--json").json()
    assert sum(s["status"]["write_operations"] for s in after["shards"]) == operations_before + 5
    assert sum(s["status"]["read_gets"] for s in after["shards"]) == gets_before + 1
    assert all(s["status"]["role"] == "leader" for s in after["shards"])

    text = run.ok("status")
    assert "WRITE OPS" in text.text and "OPS/REQ" in text.text
    assert "no controller" in text.stderr


# ---- real processes: watch, ephemeral records, the installed entry point -------------


def _cairn(address: str, *argv: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "cairn.client.cli", "--address", address, *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


class LineReader:
    """Lines of a child's stream, read in a thread so that waits have deadlines."""

    def __init__(self, stream: Any) -> None:
        self.lines: list[str] = []
        self._arrived = threading.Condition()
        self._thread = threading.Thread(target=self._pump, args=(stream,), daemon=True)
        self._thread.start()

    def _pump(self, stream: Any) -> None:
        for line in stream:
            with self._arrived:
                self.lines.append(line)
                self._arrived.notify_all()

    def wait_for(self, predicate: Callable[[list[str]], bool], timeout_s: float = 30.0) -> None:
        with self._arrived:
            if not self._arrived.wait_for(lambda: predicate(self.lines), timeout_s):
                raise TimeoutError(f"not seen in time; got {self.lines}")

    def join(self) -> None:
        self._thread.join(timeout=SUBPROCESS_TIMEOUT_S)


@pytest.fixture
def children() -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for child in started:
        if child.poll() is None:
            child.kill()
        child.wait(timeout=SUBPROCESS_TIMEOUT_S)
        for stream in (child.stdout, child.stderr):
            if stream is not None:
                stream.close()


def test_watch_prints_notifications_until_interrupted(
    server: StandaloneProcess, run: Cli, children: list[subprocess.Popen[str]]
) -> None:
    watcher = _cairn(server.address, "watch", "--json")
    children.append(watcher)
    stdout, stderr = LineReader(watcher.stdout), LineReader(watcher.stderr)
    # Each shard's feed announces where it starts before anything else.
    stderr.wait_for(lambda lines: sum("watching after offset" in line for line in lines) == 2)
    run.ok("put", "/w/1", "a")
    run.ok("put", "/w/1", "b")
    run.ok("delete", "/w/1")
    stdout.wait_for(lambda lines: len(lines) >= 3)
    events = [json.loads(line) for line in stdout.lines]
    assert [(e["type"], e["key"]) for e in events] == [
        ("created", "/w/1"),
        ("modified", "/w/1"),
        ("deleted", "/w/1"),
    ]
    assert events[0]["version_id"] < events[1]["version_id"]
    watcher.send_signal(signal.SIGINT)
    assert watcher.wait(timeout=SUBPROCESS_TIMEOUT_S) == 0
    stdout.join()
    stderr.join()


def test_watch_with_a_prefix_prints_only_matching_changes(
    server: StandaloneProcess, run: Cli, children: list[subprocess.Popen[str]]
) -> None:
    watcher = _cairn(server.address, "watch", "--json", "--prefix", "/wp/in/", "--no-versions")
    children.append(watcher)
    stdout, stderr = LineReader(watcher.stdout), LineReader(watcher.stderr)
    stderr.wait_for(lambda lines: sum("watching after offset" in line for line in lines) == 2)
    run.ok("put", "/wp/out/1", "a")
    run.ok("put", "/wp/in/1", "a")
    run.ok("put", "/wp/out/2", "b")
    run.ok("delete", "/wp/in/1")
    stdout.wait_for(lambda lines: len(lines) >= 2)
    # The last write matches nothing: the feed says it passed it.
    stderr.wait_for(lambda lines: any("passed offset" in line for line in lines))
    events = [json.loads(line) for line in stdout.lines]
    assert [(e["type"], e["key"]) for e in events] == [
        ("created", "/wp/in/1"),
        ("deleted", "/wp/in/1"),
    ]
    assert all(e.get("version_id") is None for e in events)
    watcher.send_signal(signal.SIGINT)
    assert watcher.wait(timeout=SUBPROCESS_TIMEOUT_S) == 0
    stdout.join()
    stderr.join()


def test_ephemeral_put_holds_the_record_until_interrupted(
    server: StandaloneProcess, run: Cli, children: list[subprocess.Popen[str]]
) -> None:
    holder = _cairn(server.address, "put", "/lock", "me", "--ephemeral", "--json")
    children.append(holder)
    stdout = LineReader(holder.stdout)
    stdout.wait_for(lambda lines: len(lines) >= 1)
    assert json.loads(stdout.lines[0])["key"] == "/lock"
    record = run.ok("get", "/lock", "--json").json()
    assert record["version"]["session_id"] > 0
    holder.send_signal(signal.SIGTERM)
    assert holder.wait(timeout=SUBPROCESS_TIMEOUT_S) == 0
    stdout.join()
    # Closing the session deleted the record before the command exited.
    assert run("get", "/lock").code == cli.EXIT_NOT_FOUND


def test_sequence_updates_until_interrupted(
    server: StandaloneProcess, run: Cli, children: list[subprocess.Popen[str]]
) -> None:
    follower = _cairn(server.address, "sequence-updates", "/q/x", "--partition-key", "q")
    children.append(follower)
    stdout = LineReader(follower.stdout)
    run.ok("put", "/q/x", "1", "--partition-key", "q", "--sequence-key-delta", "1")
    stdout.wait_for(lambda lines: "/q/x-00000000000000000001\n" in lines)
    follower.send_signal(signal.SIGINT)
    assert follower.wait(timeout=SUBPROCESS_TIMEOUT_S) == 0
    stdout.join()


def test_exit_codes_of_the_process(server: StandaloneProcess) -> None:
    child = _cairn(server.address, "get", "/missing")
    _, stderr = child.communicate(timeout=SUBPROCESS_TIMEOUT_S)
    assert child.returncode == cli.EXIT_NOT_FOUND
    assert "no such record" in stderr
    child = _cairn(server.address, "frobnicate")
    child.communicate(timeout=SUBPROCESS_TIMEOUT_S)
    assert child.returncode == cli.EXIT_USAGE


# ---- status with a controller -------------------------------------------------------


@pytest.mark.e2e
def test_status_with_a_controller(tmp_path: Path) -> None:
    from cairn.bench.failover import running_cluster

    with running_cluster(tmp_path / "cluster", pods=3, shards=2, auth=True) as bench:
        cluster = bench.cluster
        address = cluster.public_address(sorted(cluster.pods)[0])
        assert cluster.auth is not None  # the secure default: a token for everything
        token = cluster.auth.admin_token.read_text().strip()
        env = {
            "CAIRN_ADDRESS": address,
            "CAIRN_ADMIN_URL": cluster.controller_url,
            "CAIRN_TOKEN": token,
        }
        stdout = io.StringIO()
        stderr = io.StringIO()
        assert cli.main(["status", "--json"], env=env, stdout=stdout, stderr=stderr) == 0
        view = json.loads(stdout.getvalue())
        assert view["source"] == "controller"
        assert view["cluster"]["shards"] == 2
        assert len(view["shards"]) == 2
        assert all(shard["leader"] for shard in view["shards"])
        assert sorted(node["name"] for node in view["nodes"]) == sorted(cluster.pods)

        stdout = io.StringIO()
        assert cli.main(["status"], env=env, stdout=stdout, stderr=stderr) == 0
        text = stdout.getvalue()
        assert "cluster: generation" in text
        assert "MAX LAG" in text and "REPLICAS" in text
        for name in cluster.pods:
            assert name in text

        # The cluster's pods serve the shard map but not GetStatus on their client
        # port: without the controller the view still lists every shard.
        env["CAIRN_ADMIN_URL"] = NO_CONTROLLER_URL
        stdout = io.StringIO()
        stderr = io.StringIO()
        assert cli.main(["status", "--json"], env=env, stdout=stdout, stderr=stderr) == 0
        fallback = json.loads(stdout.getvalue())
        assert fallback["source"] == "storage"
        assert len(fallback["shards"]) == 2
        assert fallback["notes"]
