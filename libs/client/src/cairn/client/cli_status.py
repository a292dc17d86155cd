"""`cairn status`: the cluster as its controller's admin API shows it or, with no
controller answering, the shard map of the given address and each shard's
request counters."""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from typing import Any

import grpc
import httpx

from cairn.client.cli_admin import admin_api_client
from cairn.client.cli_output import Output, table
from cairn.client.client import AsyncClient
from cairn.client.options import ClientOptions
from cairn.common.tls import TlsFiles, TlsSource, aio_channel
from cairn.proto import replication_pb2 as rpb
from cairn.proto import replication_pb2_grpc as rpb_grpc

# `status` asks the controller first; one that does not answer this fast is
# taken as absent (the storage servers are asked instead).
CONTROLLER_TIMEOUT_S = 3.0


async def controller_view(
    admin_url: str, timeout_s: float, tls: TlsFiles | None = None, token: str | None = None
) -> tuple[dict[str, Any] | None, str]:
    """The cluster, shards and nodes views of the controller's admin API, or None
    and why not. `tls`: the CA (and client certificate) for an https URL. `token`:
    the bearer token the API needs (its views need read on every namespace)."""
    try:
        async with admin_api_client(admin_url, timeout_s, tls, token) as http:
            views = {}
            for name in ("cluster", "shards", "nodes"):
                response = await http.get(f"/v1/{name}")
                if response.status_code != 200:
                    detail = response.text.strip()[:200]
                    return (
                        None,
                        f"{admin_url}/v1/{name} answered HTTP {response.status_code}: {detail}",
                    )
                views[name] = response.json()
    except (httpx.HTTPError, ValueError) as error:
        return None, f"no controller at {admin_url} ({type(error).__name__}: {error})"
    return views, ""


def format_controller_view(views: Mapping[str, Any]) -> str:
    cluster = views["cluster"]
    lines = [
        f"cluster: generation {cluster['generation']} (observed {cluster['observedGeneration']}),"
        f" assignments version {cluster['assignmentsVersion']}",
        f"  shards {cluster['shards']} ({cluster['steadyShards']} steady),"
        f" nodes {cluster['nodes']} ({cluster['healthyNodes']} healthy)",
        "",
    ]
    shard_rows = []
    for shard in views["shards"]:
        lags = [follower["lag"] for follower in shard.get("followers", ())]
        shard_rows.append(
            [
                shard["namespace"],
                shard["id"],
                shard["term"],
                shard["state"],
                shard["leader"] or None,
                shard.get("headOffset"),
                shard.get("commitOffset"),
                max(lags) if lags else None,
                ",".join(shard["ensemble"]),
            ]
        )
    lines.append(
        table(
            [
                "NAMESPACE",
                "SHARD",
                "TERM",
                "STATE",
                "LEADER",
                "HEAD",
                "COMMIT",
                "MAX LAG",
                "ENSEMBLE",
            ],
            shard_rows,
        )
    )
    lines.append("")
    node_rows = [
        [
            node["name"],
            node["publicAddress"] or None,
            "yes" if node["alive"] else "no",
            "yes" if node["wanted"] else "no",
            "yes" if node["draining"] else "no",
            node["replicas"],
            node["leaders"],
        ]
        for node in views["nodes"]
    ]
    lines.append(
        table(["NODE", "ADDRESS", "ALIVE", "WANTED", "DRAINING", "REPLICAS", "LEADERS"], node_rows)
    )
    return "\n".join(lines)


def shard_status_document(status: rpb.ShardStatus) -> dict[str, Any]:
    return {
        "role": rpb.ReplicaRole.Name(status.role).lower(),
        "term": status.term,
        "head_offset": status.head.offset,
        "commit_offset": status.commit_offset,
        "applied_offset": status.applied_offset,
        "write_requests": status.write_requests,
        "write_operations": status.write_operations,
        "read_requests": status.read_requests,
        "read_gets": status.read_gets,
    }


async def shard_statuses(
    addresses: Sequence[str], timeout_s: float, tls: TlsFiles | None = None
) -> tuple[dict[int, rpb.ShardStatus], list[str]]:
    """GetStatus of every replica at each address (a standalone server serves it
    on its client port): the statuses by shard, and remarks on addresses that did
    not answer it."""
    found: dict[int, rpb.ShardStatus] = {}
    notes = []
    for address in addresses:
        async with aio_channel(address, TlsSource(tls) if tls is not None else None) as channel:
            try:
                response = await rpb_grpc.CoordinationStub(channel).GetStatus(
                    rpb.GetStatusRequest(), timeout=timeout_s
                )
            except grpc.aio.AioRpcError as error:
                if error.code() == grpc.StatusCode.UNIMPLEMENTED:
                    notes.append(
                        f"{address} does not serve GetStatus on its client port (a cluster "
                        "pod serves it on its internal port): no counters"
                    )
                else:
                    notes.append(f"GetStatus at {address} failed: {error.code().name}")
                continue
        for status in response.shards:
            found[status.shard] = status
    return found, notes


async def storage_view(args: argparse.Namespace, options: ClientOptions) -> dict[str, Any]:
    async with await AsyncClient.connect(
        args.address, namespace=args.namespace, options=options
    ) as client:
        shard_map = client.shard_map
    leaders = sorted({info.leader for info in shard_map.shards if info.leader})
    statuses, notes = await shard_statuses(leaders, args.timeout_s, options.tls)
    return {
        "source": "storage",
        "address": args.address,
        "namespace": shard_map.namespace,
        "key_order": shard_map.key_order.value,
        "shards": [
            {
                "shard": info.shard,
                "hash_range": [info.hash_range.min_inclusive, info.hash_range.max_inclusive],
                "leader": info.leader,
                "status": (
                    shard_status_document(statuses[info.shard]) if info.shard in statuses else None
                ),
            }
            for info in shard_map.shards
        ],
        "notes": notes,
    }


def format_storage_view(view: Mapping[str, Any]) -> str:
    rows = []
    for shard in view["shards"]:
        status = shard["status"] or {}
        requests = status.get("write_requests")
        operations = status.get("write_operations")
        per_request = f"{operations / requests:.1f}" if requests else None
        low, high = shard["hash_range"]
        rows.append(
            [
                shard["shard"],
                f"{low:#010x}-{high:#010x}",
                shard["leader"] or None,
                status.get("role"),
                status.get("term"),
                status.get("commit_offset"),
                requests,
                operations,
                per_request,
                status.get("read_requests"),
                status.get("read_gets"),
            ]
        )
    header = (
        f"namespace {view['namespace']} at {view['address']}: {len(rows)} shards, "
        f"{view['key_order']} key order"
    )
    headers = [
        "SHARD", "HASH RANGE", "LEADER", "ROLE", "TERM", "COMMIT",
        "WRITE REQS", "WRITE OPS", "OPS/REQ", "READ REQS", "GETS",
    ]  # fmt: skip
    return header + "\n" + table(headers, rows)


async def status_command(args: argparse.Namespace, output: Output, options: ClientOptions) -> None:
    views, why_not = await controller_view(
        args.admin_url,
        min(args.timeout_s, CONTROLLER_TIMEOUT_S),
        options.tls,
        options.bearer_token,
    )
    if views is not None:
        if output.as_json:
            output.json({"source": "controller", "admin_url": args.admin_url, **views})
        else:
            output.line(format_controller_view(views))
        return
    output.note(f"{why_not}; showing what {args.address} serves")
    view = await storage_view(args, options)
    if output.as_json:
        output.json(view)
        return
    output.line(format_storage_view(view))
    for note in view["notes"]:
        output.note(note)
