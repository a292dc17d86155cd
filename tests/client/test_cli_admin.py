"""`cairn admin`'s pure parts: the call each command line makes, when `--wait`
judges a change done, and how refusals read."""

from __future__ import annotations

from typing import Any

import pytest

from cairn.client.cli import build_parser
from cairn.client.cli_admin import (
    VIEWS,
    action_of,
    drained,
    exit_status_of,
    format_view,
    led_by,
    refusal_message,
    replicated,
    sized,
    undrained,
)
from cairn.client.cli_output import EXIT_FAILED, EXIT_UNAVAILABLE, EXIT_USAGE


def _parse(*argv: str) -> Any:
    return build_parser({}).parse_args(["admin", *argv])


@pytest.mark.parametrize(
    ("argv", "method", "path", "body"),
    [
        (("drain", "storage-2"), "PUT", "/v1/nodes/storage-2/drain", None),
        (("undrain", "storage-2"), "DELETE", "/v1/nodes/storage-2/drain", None),
        (
            ("replication-factor", "orders", "5"),
            "PUT",
            "/v1/namespaces/orders/replication-factor",
            {"replicationFactor": 5},
        ),
        (("move-leader", "3", "storage-1"), "POST", "/v1/shards/3/leader", {"node": "storage-1"}),
        (("storage-pods", "4"), "PUT", "/v1/storage-pods", {"replicas": 4}),
    ],
)
def test_each_command_makes_its_api_call(
    argv: tuple[str, ...], method: str, path: str, body: Any
) -> None:
    action = action_of(_parse(*argv))
    assert (action.method, action.path, action.body) == (method, path, body)


def test_wait_options_come_before_the_action() -> None:
    args = _parse("--wait", "--wait-timeout-s", "7", "drain", "storage-0")
    assert args.wait and args.wait_timeout_s == 7.0 and args.node == "storage-0"
    assert not _parse("drain", "storage-0").wait


def _follower(node: str, voting: bool = True, state: str = "streaming") -> dict[str, Any]:
    return {"node": node, "voting": voting, "state": state, "ackedOffset": 0, "lag": 0}


def _shard(
    shard_id: int,
    ensemble: list[str],
    leader: str = "",
    followers: list[dict[str, Any]] | None = None,
    state: str = "steady",
    leaving: list[str] | None = None,
    namespace: str = "default",
) -> dict[str, Any]:
    leader = leader or ensemble[0]
    return {
        "id": shard_id,
        "namespace": namespace,
        "state": state,
        "leader": leader,
        "ensemble": ensemble,
        "leaving": leaving or [],
        "followers": [_follower(n) for n in ensemble if n != leader]
        if followers is None
        else followers,
    }


def _node(name: str, replicas: int = 0, leaders: int = 0, **fields: Any) -> dict[str, Any]:
    return {
        "name": name,
        "replicas": replicas,
        "leaders": leaders,
        "draining": False,
        "wanted": True,
        "alive": True,
        **fields,
    }


def test_replication_factor_waits_for_size_steadiness_and_caught_up_members() -> None:
    progress = replicated("default", 3)
    nodes = [_node("s0"), _node("s1"), _node("s2")]
    done = {"shards": [_shard(0, ["s0", "s1", "s2"])], "nodes": nodes}
    assert progress(done) is None
    smaller = {"shards": [_shard(0, ["s0", "s1"])], "nodes": nodes}
    assert progress(smaller) == "shard 0 has 2 of 3 replicas"
    learning = _shard(0, ["s0", "s1", "s2"], followers=[_follower("s1"), _follower("s2", False)])
    assert progress({"shards": [learning], "nodes": nodes}) == "shard 0: s2 is still catching up"
    unreported = _shard(0, ["s0", "s1", "s2"], followers=[])
    assert progress({"shards": [unreported], "nodes": nodes}) is not None
    electing = _shard(0, ["s0", "s1", "s2"], state="electing")
    assert progress({"shards": [electing], "nodes": nodes}) == "shard 0 is electing"
    removing = _shard(0, ["s0", "s1", "s2"], leaving=["s3"])
    assert progress({"shards": [removing], "nodes": nodes}) is not None
    # Another namespace's shards are not this change's business.
    other = _shard(1, ["s0"], namespace="other")
    assert progress({"shards": [_shard(0, ["s0", "s1", "s2"]), other], "nodes": nodes}) is None


def test_leader_move_waits_for_the_named_leader() -> None:
    progress = led_by(0, "s1")
    nodes = [_node("s0"), _node("s1"), _node("s2")]
    before = {"shards": [_shard(0, ["s0", "s1", "s2"], leader="s0")], "nodes": nodes}
    assert progress(before) == "shard 0 is led by s0"
    after = {"shards": [_shard(0, ["s0", "s1", "s2"], leader="s1")], "nodes": nodes}
    assert progress(after) is None
    assert led_by(7, "s1")(after) == "shard 7 is not in the cluster view"


def test_drain_waits_until_the_node_holds_nothing() -> None:
    progress = drained("s0")
    holding = {"shards": [], "nodes": [_node("s0", replicas=2, leaders=1)]}
    assert progress(holding) == "s0 still holds 2 replica(s)"
    assert progress({"shards": [], "nodes": [_node("s0")]}) is None
    assert undrained("s0")({"shards": [], "nodes": [_node("s0", draining=True)]}) is not None
    assert undrained("s0")({"shards": [], "nodes": [_node("s0")]}) is None


def test_pod_count_waits_for_new_pods_alive_and_leaving_pods_empty() -> None:
    progress = sized(4)
    three = [_node("s0"), _node("s1"), _node("s2")]
    assert progress({"shards": [], "nodes": three}) == "3 of 4 storage pods are wanted"
    starting = [*three, _node("s3", alive=False)]
    assert progress({"shards": [], "nodes": starting}) == "s3 is not alive yet"
    assert progress({"shards": [], "nodes": [*three, _node("s3")]}) is None
    shrinking = [*three, _node("s3", replicas=1, wanted=False)]
    assert sized(3)({"shards": [], "nodes": shrinking}) == "s3 (leaving) still holds 1 replica(s)"


def test_refusals_read_as_their_problem_documents() -> None:
    problem = '{"type": "about:blank", "title": "Conflict", "status": 409, "detail": "no"}'
    assert refusal_message(409, problem) == "HTTP 409 Conflict: no"
    assert refusal_message(502, "<html>bad gateway</html>") == "HTTP 502: <html>bad gateway</html>"
    assert exit_status_of(409) == exit_status_of(422) == exit_status_of(404) == EXIT_USAGE
    assert exit_status_of(401) == exit_status_of(403) == EXIT_FAILED
    assert exit_status_of(503) == EXIT_UNAVAILABLE


def test_views_parse_and_print_as_tables() -> None:
    assert {name: VIEWS[name].path for name in VIEWS} == {
        "nodes": "/v1/nodes",
        "shards": "/v1/shards",
        "elections": "/v1/elections",
        "namespaces": "/v1/namespaces",
    }
    for name in VIEWS:
        assert _parse(name).admin_command == name
    node = {"name": "storage-0", "publicAddress": "10.0.0.1:6648", "alive": True,
            "wanted": True, "draining": False, "replicas": 2, "leaders": 1}  # fmt: skip
    assert format_view(VIEWS["nodes"], [node]).splitlines() == [
        "NODE       ADDRESS        ALIVE  WANTED  DRAINING  REPLICAS  LEADERS",
        "storage-0  10.0.0.1:6648  yes    yes     no        2         1",
    ]
    shard = {**_shard(0, ["storage-0", "storage-1"]), "term": 1, "leader": "",
             "headOffset": None, "commitOffset": 4}  # fmt: skip
    (_, row) = format_view(VIEWS["shards"], [shard]).splitlines()
    assert row.split() == ["default", "0", "1", "steady", "-", "-", "4", "0",
                           "storage-0,storage-1"]  # fmt: skip
    namespace = {"name": "default", "replicationFactor": 3, "shards": [0, 1, 2]}
    assert format_view(VIEWS["namespaces"], [namespace]).splitlines()[1].split() == [
        "default", "3", "3", "0,1,2"
    ]  # fmt: skip
    election = {"namespace": "default", "shard": 1, "term": 4, "leader": "storage-2",
                "reason": "leader lost", "startedMs": 1000, "durationMs": 35}  # fmt: skip
    assert "storage-2  leader lost  1000" in format_view(VIEWS["elections"], [election])
