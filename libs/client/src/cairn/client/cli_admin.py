"""`cairn admin`: see and change a cluster through its controller's admin API.

    cairn admin nodes                        the storage pods: address, alive, draining, replicas
    cairn admin shards                       each shard: term, state, leader, offsets, ensemble
    cairn admin elections                    the recent elections, newest first
    cairn admin namespaces                   each namespace: shards, replication factor
    cairn admin drain NODE                   move every replica off NODE (it stays in the pod count)
    cairn admin undrain NODE                 let NODE take replicas again
    cairn admin replication-factor NS N      the replicas of each of NS's shards
    cairn admin move-leader SHARD NODE       make NODE (a member) SHARD's leader
    cairn admin storage-pods N               the number of storage pods

The four views print a table, or with `--json` the API's JSON array as it is.
Each change asks the controller once and prints what it accepted. The controller carries
changes out in the background; `--wait` follows the cluster views until the change
has taken effect (or `--wait-timeout-s` passes) and says what it is waiting for.

Refusals are the API's problem documents, shown as `HTTP STATUS TITLE: DETAIL`:
an invalid change (400, 404, 409, 415, 422) exits 2, missing or insufficient
credentials (401, 403) exit 5, and a controller that does not answer or is not
leading (503) exits 4, as a timed-out `--wait` does.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from cairn.client.cli_output import EXIT_FAILED, EXIT_UNAVAILABLE, EXIT_USAGE, Output, table
from cairn.client.options import ClientOptions
from cairn.common.tls import LiveSSLContext, TlsFiles, TlsSource

# How often `--wait` reads the cluster views again.
WAIT_POLL_S = 0.5
DEFAULT_WAIT_TIMEOUT_S = 300.0
INVALID_CHANGE_STATUSES = frozenset({400, 404, 409, 415, 422})
CREDENTIAL_STATUSES = frozenset({401, 403})

# The cluster views `--wait` judges by: "shards" and "nodes", as the API serves them.
Views = Mapping[str, Sequence[Mapping[str, Any]]]
# None: the change has taken effect; otherwise what is still awaited.
Progress = Callable[[Views], str | None]


class AdminError(Exception):
    """A refused or failed admin call: the message to show and the exit status."""

    def __init__(self, message: str, exit_status: int) -> None:
        super().__init__(message)
        self.exit_status = exit_status


@dataclass(frozen=True)
class AdminAction:
    """One call to the admin API, and how to tell that it has taken effect."""

    method: str
    path: str
    body: dict[str, Any] | None
    description: str
    progress: Progress


@dataclass(frozen=True)
class AdminView:
    """A read-only view of the admin API, and its columns as a table."""

    path: str
    help: str
    headers: tuple[str, ...]
    row: Callable[[Mapping[str, Any]], Sequence[Any]]


def _yes(flag: Any) -> str:
    return "yes" if flag else "no"


def _node_row(n: Mapping[str, Any]) -> Sequence[Any]:
    flags = (_yes(n["alive"]), _yes(n["wanted"]), _yes(n["draining"]))
    return (n["name"], n["publicAddress"] or None, *flags, n["replicas"], n["leaders"])


def _shard_row(s: Mapping[str, Any]) -> Sequence[Any]:
    lags = [follower["lag"] for follower in s.get("followers", ())]
    offsets = (s.get("headOffset"), s.get("commitOffset"), max(lags) if lags else None)
    ensemble = ",".join(s["ensemble"])
    return (s["namespace"], s["id"], s["term"], s["state"], s["leader"] or None, *offsets, ensemble)


def _election_row(e: Mapping[str, Any]) -> Sequence[Any]:
    where = (e["namespace"], e["shard"], e["term"], e["leader"] or None)
    return (*where, e["reason"], e["startedMs"], e["durationMs"])


def _namespace_row(n: Mapping[str, Any]) -> Sequence[Any]:
    shard_ids = ",".join(str(shard) for shard in n["shards"])
    return (n["name"], len(n["shards"]), n["replicationFactor"], shard_ids)


VIEWS: Mapping[str, AdminView] = {
    "nodes": AdminView(
        "/v1/nodes",
        "the storage pods: address, alive, wanted, draining, replicas, leaders",
        ("NODE", "ADDRESS", "ALIVE", "WANTED", "DRAINING", "REPLICAS", "LEADERS"),
        _node_row,
    ),
    "shards": AdminView(
        "/v1/shards",
        "each shard: term, state, leader, offsets, lag, ensemble",
        ("NAMESPACE", "SHARD", "TERM", "STATE", "LEADER", "HEAD", "COMMIT", "MAX LAG", "ENSEMBLE"),
        _shard_row,
    ),
    "elections": AdminView(
        "/v1/elections",
        "the recent elections, newest first",
        ("NAMESPACE", "SHARD", "TERM", "LEADER", "REASON", "STARTED MS", "DURATION MS"),
        _election_row,
    ),
    "namespaces": AdminView(
        "/v1/namespaces",
        "each namespace: its shards and replication factor",
        ("NAMESPACE", "SHARDS", "REPLICATION FACTOR", "SHARD IDS"),
        _namespace_row,
    ),
}


def format_view(view: AdminView, items: Sequence[Mapping[str, Any]]) -> str:
    return table(view.headers, [view.row(item) for item in items])


# ---- what each command asks, and when it is done (pure) -----------------------------


def _node(views: Views, name: str) -> Mapping[str, Any] | None:
    return next((node for node in views["nodes"] if node["name"] == name), None)


def _unsettled(shard: Mapping[str, Any]) -> str | None:
    """Why a shard is not yet serving steadily with every member a voting,
    streaming follower, or None."""
    if shard["state"] != "steady":
        return f"shard {shard['id']} is {shard['state']}"
    if not shard["leader"]:
        return f"shard {shard['id']} has no leader"
    if shard["leaving"]:
        return f"shard {shard['id']} is still removing {', '.join(shard['leaving'])}"
    followers = {follower["node"]: follower for follower in shard["followers"]}
    for member in shard["ensemble"]:
        follower = followers.get(member)
        if member == shard["leader"]:
            continue
        if follower is None or not (follower["voting"] and follower["state"] == "streaming"):
            return f"shard {shard['id']}: {member} is still catching up"
    return None


def drained(name: str) -> Progress:
    def progress(views: Views) -> str | None:
        node = _node(views, name)
        if node is None:
            return None
        if node["replicas"] or node["leaders"]:
            return f"{name} still holds {node['replicas']} replica(s)"
        return None

    return progress


def undrained(name: str) -> Progress:
    def progress(views: Views) -> str | None:
        node = _node(views, name)
        if node is not None and node["draining"]:
            return f"{name} is still marked draining"
        return None

    return progress


def replicated(namespace: str, factor: int) -> Progress:
    def progress(views: Views) -> str | None:
        shards = [shard for shard in views["shards"] if shard["namespace"] == namespace]
        for shard in shards:
            if len(shard["ensemble"]) != factor:
                return f"shard {shard['id']} has {len(shard['ensemble'])} of {factor} replicas"
            unsettled = _unsettled(shard)
            if unsettled is not None:
                return unsettled
        return None

    return progress


def led_by(shard_id: int, name: str) -> Progress:
    def progress(views: Views) -> str | None:
        shard = next((s for s in views["shards"] if s["id"] == shard_id), None)
        if shard is None:
            return f"shard {shard_id} is not in the cluster view"
        if shard["leader"] != name:
            return f"shard {shard_id} is led by {shard['leader'] or 'nobody'}"
        return _unsettled(shard)

    return progress


def sized(pods: int) -> Progress:
    def progress(views: Views) -> str | None:
        nodes = views["nodes"]
        wanted = [node for node in nodes if node["wanted"]]
        if len(wanted) != pods:
            return f"{len(wanted)} of {pods} storage pods are wanted"
        for node in wanted:
            if not node["alive"]:
                return f"{node['name']} is not alive yet"
        for node in nodes:
            if not node["wanted"] and node["replicas"]:
                return f"{node['name']} (leaving) still holds {node['replicas']} replica(s)"
        return None

    return progress


def action_of(args: argparse.Namespace) -> AdminAction:
    """The API call of a parsed `cairn admin` command line."""
    match args.admin_command:
        case "drain":
            return AdminAction(
                "PUT",
                f"/v1/nodes/{args.node}/drain",
                None,
                f"drain {args.node}",
                drained(args.node),
            )
        case "undrain":
            return AdminAction(
                "DELETE",
                f"/v1/nodes/{args.node}/drain",
                None,
                f"undrain {args.node}",
                undrained(args.node),
            )
        case "replication-factor":
            return AdminAction(
                "PUT",
                f"/v1/namespaces/{args.namespace_name}/replication-factor",
                {"replicationFactor": args.factor},
                f"replication factor {args.factor} for namespace {args.namespace_name}",
                replicated(args.namespace_name, args.factor),
            )
        case "move-leader":
            return AdminAction(
                "POST",
                f"/v1/shards/{args.shard}/leader",
                {"node": args.node},
                f"move shard {args.shard}'s leader to {args.node}",
                led_by(args.shard, args.node),
            )
        case "storage-pods":
            return AdminAction(
                "PUT",
                "/v1/storage-pods",
                {"replicas": args.pods},
                f"{args.pods} storage pods",
                sized(args.pods),
            )
    raise AssertionError(f"unknown admin command {args.admin_command!r}")


def refusal_message(status: int, body: str) -> str:
    """`HTTP 409 Not a member: ...` from a problem document, or the raw answer."""
    try:
        problem = json.loads(body)
    except ValueError:
        problem = None
    if isinstance(problem, dict) and "title" in problem:
        detail = problem.get("detail")
        return f"HTTP {status} {problem['title']}" + (f": {detail}" if detail else "")
    return f"HTTP {status}: {body.strip()[:200]}"


def exit_status_of(status: int) -> int:
    if status in INVALID_CHANGE_STATUSES:
        return EXIT_USAGE
    if status in CREDENTIAL_STATUSES:
        return EXIT_FAILED
    if status == 503:
        return EXIT_UNAVAILABLE
    return EXIT_FAILED


# ---- the command line ---------------------------------------------------------------


def add_admin_commands(admin: argparse.ArgumentParser) -> None:
    """The subcommands of `cairn admin` (the caller adds --admin-url and the globals)."""
    admin.add_argument(
        "--wait",
        action="store_true",
        help="follow the cluster until the change has taken effect",
    )
    admin.add_argument(
        "--wait-timeout-s",
        type=float,
        default=DEFAULT_WAIT_TIMEOUT_S,
        metavar="S",
        help=f"give up waiting after this long (default {DEFAULT_WAIT_TIMEOUT_S:g}; exit 4)",
    )
    commands = admin.add_subparsers(dest="admin_command", required=True, metavar="ACTION")
    for name, view in VIEWS.items():
        commands.add_parser(name, help=view.help, description=view.help)
    drain = commands.add_parser("drain", help="move every replica off NODE")
    drain.add_argument("node")
    undrain = commands.add_parser("undrain", help="let NODE take replicas again")
    undrain.add_argument("node")
    factor = commands.add_parser(
        "replication-factor", help="set the number of replicas of each shard of a namespace"
    )
    factor.add_argument("namespace_name", metavar="NAMESPACE")
    factor.add_argument("factor", type=int, metavar="N")
    move = commands.add_parser("move-leader", help="make NODE, a member, the shard's leader")
    move.add_argument("shard", type=int)
    move.add_argument("node")
    pods = commands.add_parser("storage-pods", help="set the number of storage pods")
    pods.add_argument("pods", type=int, metavar="N")


def admin_api_client(
    admin_url: str, timeout_s: float, tls: TlsFiles | None, token: str | None
) -> httpx.AsyncClient:
    """An HTTP client of the controller's admin API: `tls` the CA (and client
    certificate) for an https URL, `token` the bearer token it needs."""
    verify: Any = True
    if tls is not None:
        verify = LiveSSLContext(TlsSource(tls), server=False).context
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.AsyncClient(base_url=admin_url, timeout=timeout_s, verify=verify, headers=headers)


async def _call(http: httpx.AsyncClient, method: str, path: str, body: Any = None) -> Any:
    try:
        response = await http.request(method, path, json=body)
    except httpx.HTTPError as error:
        raise AdminError(
            f"no answer from the controller at {http.base_url} ({type(error).__name__}: {error})",
            EXIT_UNAVAILABLE,
        ) from None
    if response.status_code >= 400:
        raise AdminError(
            refusal_message(response.status_code, response.text),
            exit_status_of(response.status_code),
        )
    return response.json()


async def _views(http: httpx.AsyncClient) -> Views:
    return {
        "shards": await _call(http, "GET", "/v1/shards"),
        "nodes": await _call(http, "GET", "/v1/nodes"),
    }


async def _wait(
    http: httpx.AsyncClient, progress: Progress, timeout_s: float, output: Output
) -> None:
    deadline = time.monotonic() + timeout_s
    said = None
    while True:
        awaited = progress(await _views(http))
        if awaited is None:
            return
        if awaited != said:
            output.note(f"waiting: {awaited}")
            said = awaited
        if time.monotonic() >= deadline:
            raise AdminError(
                f"not done after {timeout_s:g} s: {awaited} (the controller goes on with it)",
                EXIT_UNAVAILABLE,
            )
        await asyncio.sleep(WAIT_POLL_S)


async def admin_command(args: argparse.Namespace, output: Output, options: ClientOptions) -> None:
    view = VIEWS.get(args.admin_command)
    if view is not None:
        async with admin_api_client(
            args.admin_url, args.timeout_s, options.tls, options.bearer_token
        ) as http:
            items = await _call(http, "GET", view.path)
        if output.as_json:
            output.json(items)
        else:
            output.line(format_view(view, items))
        return
    action = action_of(args)
    async with admin_api_client(
        args.admin_url, args.timeout_s, options.tls, options.bearer_token
    ) as http:
        answer = await _call(http, action.method, action.path, action.body)
        if not output.as_json:
            output.line(f"accepted: {action.description}")
        if args.wait:
            await _wait(http, action.progress, args.wait_timeout_s, output)
            if not output.as_json:
                output.line(f"done: {action.description}")
    if output.as_json:
        output.json({"action": action.description, "answer": answer, "waited": args.wait})
