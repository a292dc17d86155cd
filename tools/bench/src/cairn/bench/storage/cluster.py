"""A cluster of storage pods (`cairn-storage node`) on this machine, for the
`replication` and `snapshot` workloads: spawned, bootstrapped and stopped here.

The bench plays the controller through the coordination API, the way
`tests/support/driver.py` does, but with grpc.aio: NewTerm (term 1, with the
shard's spec) to every pod, BecomeLeader on pod 0 with the others as its
followers, PushAssignments (the shard map, every shard led by pod 0) to every
pod; then it waits until the leader serves a Read on every shard (a new leader
answers UNAVAILABLE until its first entry of the term is applied).

Each pod runs like the standalone server of server.py (this interpreter, its log
in a file polled for its address lines), in `<work>/node-<i>/` with its data in
`data/` below it.
"""

from __future__ import annotations

import asyncio
import re
import sys
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import grpc.aio

from cairn.bench.storage import security
from cairn.bench.storage.rpc import CHANNEL_OPTIONS, NAMESPACE, describe
from cairn.bench.storage.server import (
    LISTENING_LINE,
    ServerStartError,
    dialable,
    spawned_process,
)
from cairn.common.hashing import split_hash_space
from cairn.proto import oxia_client_pb2 as pb
from cairn.proto import oxia_client_pb2_grpc as pb_grpc
from cairn.proto import replication_pb2 as rpb
from cairn.proto import replication_pb2_grpc as rpb_grpc

_NODE_CODE = "import sys; from cairn.storage.__main__ import main; sys.exit(main())"
INTERNAL_LINE = re.compile(r"cairn-storage internal on (\S+)")
TERM = 1
READY_POLL_S = 0.05
# A pod log line worth reporting: a warning, an error, or a traceback.
_PROBLEM = re.compile(r"\b(WARNING|ERROR|CRITICAL)\b|Traceback")


class ClusterError(RuntimeError):
    """Bootstrapping or observing the cluster failed."""


@dataclass(frozen=True, slots=True)
class Pod:
    index: int
    address: str  # the client API, what the shard map names as leader
    internal_address: str  # coordination and replication
    pid: int
    data_dir: Path
    log_path: Path

    def node(self) -> Any:
        return rpb.Node(public_address=self.address, internal_address=self.internal_address)

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""


def node_command(data_dir: Path, extra_args: Sequence[str]) -> list[str]:
    return [
        sys.executable,
        "-c",
        _NODE_CODE,
        "node",
        "--port",
        "0",
        "--internal-port",
        "0",
        "--data-dir",
        str(data_dir),
        "--metrics-port",
        "0",
        # Plaintext unless the caller gives a certificate directory; without
        # credentials unless it gives an auth file (--server-arg --auth-config FILE
        # measures the data path with them).
        *([] if "--tls-dir" in extra_args else ["--insecure"]),
        *([] if "--auth-config" in extra_args else ["--no-auth"]),
        *extra_args,
    ]


def log_problems(text: str) -> list[str]:
    """The lines of a pod's log that are warnings, errors or tracebacks."""
    return [line for line in text.splitlines() if _PROBLEM.search(line)]


def shard_spec() -> Any:
    """The spec of every shard: namespace `default`; the zero values mean hierarchical
    keys and notifications on, as a standalone server's shards."""
    return rpb.ShardSpec(namespace=NAMESPACE)


def shard_map(shards: Sequence[int], leader_address: str) -> Any:
    """The ShardAssignments message: shard ids in order split the hash space."""
    assignments = pb.ShardAssignments()
    namespace = assignments.namespaces[NAMESPACE]
    namespace.shard_key_router = pb.XXHASH3
    ordered = sorted(shards)
    for shard, bounds in zip(ordered, split_hash_space(len(ordered)), strict=True):
        entry = namespace.assignments.add(shard=shard, leader=leader_address)
        entry.int32_hash_range.min_hash_inclusive = bounds.min_inclusive
        entry.int32_hash_range.max_hash_inclusive = bounds.max_inclusive
    return assignments


class Cluster:
    """Pods spawned in `work_dir`; every shard is led by pod 0 in term 1.

    Use through `running_cluster` (which bootstraps and stops it); `spawn_pod`
    adds a pod later (stopped with the others), `add_follower` makes it a member.
    """

    def __init__(
        self,
        work_dir: Path,
        shards: Sequence[int],
        node_args: Sequence[str],
        start_timeout_s: float,
        stop_timeout_s: float,
        rpc_timeout_s: float,
    ) -> None:
        self.work_dir = work_dir
        self.shards = list(shards)
        self.node_args = list(node_args)
        self.start_timeout_s = start_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self.rpc_timeout_s = rpc_timeout_s
        self.pods: list[Pod] = []
        self.term = TERM
        self._pod_stacks: list[AsyncExitStack] = []  # one per pod, in pod order
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._map_version = 0

    @property
    def leader(self) -> Pod:
        return self.pods[0]

    @property
    def pids(self) -> tuple[int, ...]:
        return tuple(pod.pid for pod in self.pods)

    def _channel(self, address: str, internal: bool = False) -> grpc.aio.Channel:
        channel = self._channels.get(address)
        if channel is None:
            channel = security.channel(address, CHANNEL_OPTIONS, internal)
            self._channels[address] = channel
        return channel

    def coordination(self, pod: Pod) -> Any:
        return rpb_grpc.CoordinationStub(self._channel(pod.internal_address, internal=True))

    async def spawn_pod(self) -> Pod:
        """One more pod, stopped (SIGTERM, then SIGKILL) when the cluster is."""
        index = len(self.pods)
        pod_dir = self.work_dir / f"node-{index}"
        pod_dir.mkdir(parents=True, exist_ok=True)
        data_dir = pod_dir / "data"
        stack = AsyncExitStack()
        self._pod_stacks.append(stack)
        process = await stack.enter_async_context(
            spawned_process(
                f"pod {index}",
                node_command(data_dir, [*security.spawned_args(f"pod-{index}"), *self.node_args]),
                # The internal line comes after the listening line: both are there.
                INTERNAL_LINE,
                self.start_timeout_s,
                self.stop_timeout_s,
                pod_dir,
            )
        )
        text = process.log_path.read_text(encoding="utf-8", errors="replace")
        public = LISTENING_LINE.search(text)
        if public is None:
            raise ServerStartError(f"pod {index} printed no client address:\n{text[-2000:]}")
        pod = Pod(
            index=index,
            address=dialable(public.group(1)),
            internal_address=process.address,
            pid=process.pid,
            data_dir=data_dir,
            log_path=process.log_path,
        )
        self.pods.append(pod)
        return pod

    async def _rpc(self, what: str, call: Any) -> Any:
        try:
            return await call
        except grpc.aio.AioRpcError as error:
            raise ClusterError(f"{what}: {describe(error)}") from None

    async def new_term(self, pod: Pod, shard: int) -> Any:
        request = rpb.NewTermRequest(shard=shard, term=self.term, spec=shard_spec())
        return await self._rpc(
            f"NewTerm(shard {shard}) to pod {pod.index}",
            self.coordination(pod).NewTerm(request, timeout=self.rpc_timeout_s),
        )

    async def bootstrap(self) -> None:
        """Fence every shard on every pod, make pod 0 lead them all, push the map,
        wait until the leader serves reads."""
        leader = self.leader
        for shard in self.shards:
            for pod in self.pods:
                await self.new_term(pod, shard)
            request = rpb.BecomeLeaderRequest(
                shard=shard,
                term=self.term,
                leader=leader.node(),
                followers=[pod.node() for pod in self.pods[1:]],
            )
            await self._rpc(
                f"BecomeLeader(shard {shard}) to pod 0",
                self.coordination(leader).BecomeLeader(request, timeout=self.rpc_timeout_s),
            )
        await self.push_map()
        await self.wait_serving(self.start_timeout_s)

    async def push_map(self) -> None:
        self._map_version += 1
        request = rpb.PushAssignmentsRequest(
            assignments=shard_map(self.shards, self.leader.address), version=self._map_version
        )
        for pod in self.pods:
            await self._rpc(
                f"PushAssignments to pod {pod.index}",
                self.coordination(pod).PushAssignments(request, timeout=self.rpc_timeout_s),
            )

    async def wait_serving(self, timeout_s: float) -> None:
        """Until the leader answers a Read on every shard (UNAVAILABLE is retried)."""
        stub = pb_grpc.OxiaClientStub(self._channel(self.leader.address))
        deadline_s = time.monotonic() + timeout_s
        for shard in self.shards:
            request = pb.ReadRequest(shard=shard, gets=[pb.GetRequest(key="/bench/ready")])
            while True:
                try:
                    async for _ in stub.Read(request, timeout=self.rpc_timeout_s):
                        pass
                    break
                except grpc.aio.AioRpcError as error:
                    if error.code() != grpc.StatusCode.UNAVAILABLE:
                        raise ClusterError(f"Read on shard {shard}: {describe(error)}") from None
                    if time.monotonic() > deadline_s:
                        raise ClusterError(
                            f"shard {shard}: the leader did not serve reads within "
                            f"{timeout_s:.0f} s: {describe(error)}"
                        ) from None
                await asyncio.sleep(READY_POLL_S)

    async def status(self, pod: Pod, shard: int) -> Any:
        """The ShardStatus of `shard` on `pod`."""
        answer = await self._rpc(
            f"GetStatus(shard {shard}) to pod {pod.index}",
            self.coordination(pod).GetStatus(
                rpb.GetStatusRequest(shard=shard), timeout=self.rpc_timeout_s
            ),
        )
        if len(answer.shards) != 1:
            raise ClusterError(f"pod {pod.index} has no replica of shard {shard}")
        return answer.shards[0]

    async def add_follower(self, pod: Pod, shard: int) -> None:
        """NewTerm the pod at the cluster's term (creating its replica), then tell the
        leader to add it to the shard's ensemble."""
        await self.new_term(pod, shard)
        request = rpb.AddFollowerRequest(shard=shard, term=self.term, follower=pod.node())
        await self._rpc(
            f"AddFollower(shard {shard}, pod {pod.index})",
            self.coordination(self.leader).AddFollower(request, timeout=self.rpc_timeout_s),
        )

    async def lagging(self, shard: int) -> list[str]:
        """Followers of `shard` whose commit offset is short of the leader's head
        (empty: all caught up)."""
        head = (await self.status(self.leader, shard)).head.offset
        behind = []
        for pod in self.pods[1:]:
            commit = (await self.status(pod, shard)).commit_offset
            if commit < head:
                behind.append(f"pod {pod.index} at {commit}/{head}")
        return behind

    async def wait_caught_up(self, timeout_s: float) -> float:
        """Until every follower's commit offset reaches the leader's head on every
        shard (no writes meanwhile); returns the seconds it took."""
        started_s = time.monotonic()
        for shard in self.shards:
            while True:
                behind = await self.lagging(shard)
                if not behind:
                    break
                if time.monotonic() - started_s > timeout_s:
                    raise ClusterError(
                        f"shard {shard}: followers not caught up within {timeout_s:.0f} s: "
                        + ", ".join(behind)
                    )
                await asyncio.sleep(READY_POLL_S)
        return time.monotonic() - started_s

    def problems(self) -> dict[int, list[str]]:
        """Warning, error and traceback lines of each pod's log, by pod index."""
        return {pod.index: log_problems(pod.log_text()) for pod in self.pods}

    async def close(self) -> None:
        for channel in self._channels.values():
            await channel.close()
        self._channels.clear()
        # The leader first: a follower with the leader's Replicate stream still open
        # would wait out its shutdown grace for it.
        for stack in self._pod_stacks:
            await stack.aclose()
        self._pod_stacks.clear()


@asynccontextmanager
async def running_cluster(
    size: int,
    shards: int,
    work_dir: Path,
    node_args: Sequence[str],
    start_timeout_s: float,
    stop_timeout_s: float,
    rpc_timeout_s: float,
) -> AsyncIterator[Cluster]:
    """`size` pods serving shards 0..shards-1, all led by pod 0 (the others follow);
    stopped on exit. The work dir (pods' logs and data) is the caller's."""
    cluster = Cluster(
        work_dir, range(shards), node_args, start_timeout_s, stop_timeout_s, rpc_timeout_s
    )
    try:
        for _ in range(size):
            await cluster.spawn_pod()
        await cluster.bootstrap()
        yield cluster
    finally:
        await cluster.close()
