"""`cairn admin` against a real local cluster with authentication on: its views
(nodes, shards, elections, namespaces), a leader move, a replication-factor
change and a drain, each followed with `--wait`, and the refusals an operator
meets. (That writes survive these changes is the
controller tests' business, tests/e2e/test_controller.py.)"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from cairn.bench.failover import FailoverBench, running_cluster
from cairn.client.cli import main

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FailoverBench]:
    directory = tmp_path_factory.mktemp("admin-cluster")
    with running_cluster(directory, pods=3, shards=2, auth=True) as bench:
        yield bench


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str


def _cairn_admin(bench: FailoverBench, *argv: str, token: bool = True) -> Result:
    """`cairn admin ...` in this process (the command line as a whole, parser to
    exit status; the process entry point is tested in tests/client/test_cli.py)."""
    assert bench.cluster.auth is not None
    env = {"CAIRN_ADMIN_URL": bench.cluster.controller_url}
    credentials = ["--token-file", str(bench.cluster.auth.admin_token)] if token else []
    stdout, stderr = io.StringIO(), io.StringIO()
    code = main(["admin", *credentials, *argv], env=env, stdout=stdout, stderr=stderr)
    return Result(code, stdout.getvalue(), stderr.getvalue())


def _ok(result: Result) -> str:
    assert result.returncode == 0, (result.returncode, result.stdout, result.stderr)
    return result.stdout


def test_views_list_the_cluster_as_tables_and_json(bench: FailoverBench) -> None:
    nodes = json.loads(_ok(_cairn_admin(bench, "--json", "nodes")))
    assert [n["name"] for n in nodes] == [n["name"] for n in bench.nodes()]
    assert sorted(n["name"] for n in nodes) == ["storage-0", "storage-1", "storage-2"]
    shards = json.loads(_ok(_cairn_admin(bench, "--json", "shards")))
    assert [(s["id"], s["namespace"]) for s in shards] == [
        (s["id"], s["namespace"]) for s in bench.shards()
    ]
    (namespace,) = json.loads(_ok(_cairn_admin(bench, "--json", "namespaces")))
    assert namespace["name"] == "default"
    assert sorted(namespace["shards"]) == sorted(s["id"] for s in shards)
    elections = json.loads(_ok(_cairn_admin(bench, "--json", "elections")))
    # Every shard's first leader was elected.
    assert {e["shard"] for e in elections} >= {s["id"] for s in shards}
    table = _ok(_cairn_admin(bench, "nodes")).splitlines()
    assert table[0].split()[:3] == ["NODE", "ADDRESS", "ALIVE"]
    assert sorted(line.split()[0] for line in table[1:]) == ["storage-0", "storage-1", "storage-2"]
    table = _ok(_cairn_admin(bench, "shards")).splitlines()
    assert len(table) == 1 + len(shards)
    # The views need credentials like the changes.
    refused = _cairn_admin(bench, "shards", token=False)
    assert refused.returncode == 5 and "HTTP 401" in refused.stderr, refused


def test_refusals_change_nothing_and_exit_by_kind(bench: FailoverBench) -> None:
    before = bench.shards()
    no_token = _cairn_admin(bench, "drain", "storage-0", token=False)
    assert no_token.returncode == 5, no_token
    assert "HTTP 401" in no_token.stderr
    outsider = _cairn_admin(bench, "move-leader", "0", "storage-9")
    assert outsider.returncode == 2, outsider
    assert "HTTP 409 Conflict: storage-9 is not in shard 0's ensemble" in outsider.stderr
    assert _cairn_admin(bench, "replication-factor", "nope", "1").returncode == 2
    invalid = _cairn_admin(bench, "replication-factor", "default", "0")
    assert invalid.returncode == 2 and "HTTP 400 Bad Request" in invalid.stderr, invalid
    assert [(s["id"], s["ensemble"]) for s in bench.shards()] == [
        (s["id"], s["ensemble"]) for s in before
    ]
    assert all(not node["draining"] for node in bench.nodes())


def test_leader_move_replication_factor_and_drain_with_wait(bench: FailoverBench) -> None:
    shard = bench.shards()[0]
    target = next(name for name in shard["ensemble"] if name != shard["leader"])
    out = _ok(_cairn_admin(bench, "--wait", "move-leader", str(shard["id"]), target))
    assert f"done: move shard {shard['id']}'s leader to {target}" in out
    # Done means done: the view says so the moment the command returns.
    assert next(s for s in bench.shards() if s["id"] == shard["id"])["leader"] == target
    out = _ok(_cairn_admin(bench, "--wait", "replication-factor", "default", "2"))
    assert "done: replication factor 2 for namespace default" in out
    assert all(len(s["ensemble"]) == 2 for s in bench.shards())
    assert bench.settled()
    # At 2 replicas on 3 pods, one pod can be emptied.
    out = _ok(_cairn_admin(bench, "--wait", "drain", "storage-0"))
    assert "done: drain storage-0" in out
    assert all("storage-0" not in s["ensemble"] for s in bench.shards())
    node = next(n for n in bench.nodes() if n["name"] == "storage-0")
    assert node["draining"] and node["replicas"] == 0
    _ok(_cairn_admin(bench, "--wait", "undrain", "storage-0"))
    assert not next(n for n in bench.nodes() if n["name"] == "storage-0")["draining"]
    out = _ok(_cairn_admin(bench, "--wait", "replication-factor", "default", "3"))
    assert all(len(s["ensemble"]) == 3 for s in bench.shards())
    assert bench.settled()
    leader = bench.shards()[0]["leader"]
    result = _cairn_admin(bench, "--json", "move-leader", str(shard["id"]), leader)
    document = json.loads(_ok(result))
    assert document["answer"] == {"shard": shard["id"], "node": leader, "accepted": True}


def test_a_wait_that_cannot_finish_says_what_it_waits_for(bench: FailoverBench) -> None:
    """Three replicas on three pods: a drained pod cannot be emptied, and the
    command says so when its wait runs out (the drain stays asked for)."""
    result = _cairn_admin(bench, "--wait", "--wait-timeout-s", "2", "drain", "storage-1")
    assert result.returncode == 4, result
    assert "not done after 2 s: storage-1 still holds" in result.stderr
    _ok(_cairn_admin(bench, "--wait", "undrain", "storage-1"))
    bench.wait_settled()
