"""cairn-audit: do the replicas of every shard hold the same records?

    cairn-audit --controller http://controller:8080 --insecure
    cairn-audit --controller https://controller:8080 --tls-dir /certs/controller \
        --token-file /etc/cairn/auth/admin.token

For each shard the job reads the leader's head offset, then asks every replica of
the ensemble for a digest of its records at that offset (GetStateDigest on the
pods' internal port: each replica stops applying there just long enough to take a
consistent view, hashes it, and answers). A replica already past the offset
answers so, and the shard is asked again at a newer head. Digests that differ
from the majority's name the shard, the replica and the offset; a healthy cluster
gets one summary line. Exit status: 0 all agree, 1 a divergence, 2 a shard could
not be compared (a replica unreachable, no offset all reached in time).

It finds what the replicated log cannot: records changed behind Cairn's back (a
disk, a bug in applying, a hand edit), since every replica applied the same
entries. The pods do the hashing; the job only asks and compares, so it needs no
Spark session (it runs under spark-submit like the other jobs, on the driver).
The internal port takes a controller identity (--tls-dir) when the cluster has TLS.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from cairn.client.failures import server_status
from cairn.common.errors import OffsetPassed
from cairn.common.tls import TlsSource, aio_channel, client_ssl_context
from cairn.common.version import add_version_option
from cairn.proto import replication_pb2 as rpb
from cairn.proto import replication_pb2_grpc as rpb_grpc
from cairn.spark import DISTRIBUTION
from cairn.spark.jobs.progress import say

OFFSET_PASSED = OffsetPassed.reason


@dataclass(frozen=True, slots=True)
class Digest:
    records: int
    sha256: str  # hex


@dataclass(frozen=True, slots=True)
class Divergence:
    namespace: str
    shard: int
    offset: int
    replica: str
    digest: Digest
    # What the other replicas (the majority, if there is one) hold.
    expected: Digest | None

    def describe(self) -> str:
        expected = (
            f"the majority's {self.expected.records} records, sha256 {self.expected.sha256[:16]}"
            if self.expected is not None
            else "no majority to compare with"
        )
        return (
            f"DIVERGENCE namespace {self.namespace} shard {self.shard} at offset {self.offset}: "
            f"replica {self.replica} holds {self.digest.records} records, sha256 "
            f"{self.digest.sha256[:16]}; {expected}"
        )


def divergences(
    namespace: str, shard: int, offset: int, digests: Mapping[str, Digest]
) -> list[Divergence]:
    """The replicas whose digest differs from the majority's (every replica when no
    digest has a strict majority). Pure."""
    if not digests:
        return []
    (common, count), *_ = Counter(digests.values()).most_common(1)
    majority = common if count * 2 > len(digests) else None
    return [
        Divergence(namespace, shard, offset, name, digest, majority)
        for name, digest in sorted(digests.items())
        if digest != majority
    ]


@dataclass(frozen=True, slots=True)
class ShardAudit:
    namespace: str
    shard: int
    offset: int | None
    digests: dict[str, Digest]
    # Why the shard could not be compared (None: it was).
    problem: str | None = None


class AdminApiRefused(Exception):
    """The controller's admin API refused to show the cluster (credentials, most likely)."""


class _Passed(Exception):
    """A replica applied past the offset asked for."""


class Auditor:
    def __init__(
        self,
        controller_url: str,
        tls_dir: Path | None,
        timeout_s: float,
        attempts: int,
        token: str | None = None,
    ) -> None:
        self.controller_url = controller_url.rstrip("/")
        # The admin API's bearer token (its views need read on every namespace).
        self.headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.tls = TlsSource.from_directory(tls_dir) if tls_dir is not None else None
        live = client_ssl_context(tls_dir)
        self.ssl_context = live.context if live is not None else None
        self.timeout_s = timeout_s
        self.attempts = attempts

    def _get(self, path: str) -> Any:
        request = urllib.request.Request(self.controller_url + path, headers=self.headers)
        try:
            with urllib.request.urlopen(
                request, timeout=self.timeout_s, context=self.ssl_context
            ) as answer:
                return json.loads(answer.read())
        except urllib.error.HTTPError as error:
            with error:
                detail = error.read(300).decode("utf-8", errors="replace").strip()
            raise AdminApiRefused(
                f"{self.controller_url}{path} answered HTTP {error.code}: {detail}"
            ) from None

    async def run(self, namespace: str | None) -> list[ShardAudit]:
        shards, nodes = self._get("/v1/shards"), self._get("/v1/nodes")
        internal = {node["name"]: node["internalAddress"] for node in nodes}
        wanted = [s for s in shards if namespace is None or s["namespace"] == namespace]
        return list(await asyncio.gather(*(self._shard(s, internal) for s in wanted)))

    async def _shard(self, shard: Mapping[str, Any], internal: Mapping[str, str]) -> ShardAudit:
        namespace, shard_id = shard["namespace"], int(shard["id"])
        members = {name: internal.get(name, "") for name in shard["ensemble"]}
        missing = sorted(name for name, address in members.items() if not address)
        if missing:
            return ShardAudit(namespace, shard_id, None, {}, f"no address for {missing}")
        problem = "no offset every replica reached in time"
        for _ in range(self.attempts):
            try:
                offset = await self._head(members[shard["leader"]], shard_id)
                answers = await asyncio.gather(
                    *(self._digest(address, shard_id, offset) for address in members.values())
                )
            except _Passed:
                continue  # writes went on meanwhile: again at the newer head
            except grpc.aio.AioRpcError as error:
                problem = f"{error.code().name}: {error.details()}"
                if error.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
                    continue
                break
            return ShardAudit(namespace, shard_id, offset, dict(zip(members, answers, strict=True)))
        return ShardAudit(namespace, shard_id, None, {}, problem)

    def _channel(self, address: str) -> grpc.aio.Channel:
        return aio_channel(address, self.tls)

    async def _head(self, address: str, shard: int) -> int:
        async with self._channel(address) as channel:
            reply = await rpb_grpc.CoordinationStub(channel).GetStatus(
                rpb.GetStatusRequest(shard=shard), timeout=self.timeout_s
            )
        (status,) = reply.shards
        head: int = status.head.offset
        return head

    async def _digest(self, address: str, shard: int, offset: int) -> Digest:
        request = rpb.GetStateDigestRequest(
            shard=shard, offset=offset, timeout_ms=round(self.timeout_s * 1000)
        )
        async with self._channel(address) as channel:
            try:
                reply = await rpb_grpc.CoordinationStub(channel).GetStateDigest(
                    request, timeout=self.timeout_s * 2
                )
            except grpc.aio.AioRpcError as error:
                if server_status(error).reason == OFFSET_PASSED:
                    raise _Passed from None
                raise
        return Digest(reply.records, reply.sha256.hex())


def report(audits: Sequence[ShardAudit]) -> tuple[list[Divergence], list[ShardAudit]]:
    """Every divergence, and the shards that could not be compared."""
    found: list[Divergence] = []
    for audit in audits:
        if audit.offset is not None:
            found += divergences(audit.namespace, audit.shard, audit.offset, audit.digests)
    return found, [audit for audit in audits if audit.problem is not None]


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="cairn-audit", description=__doc__.split("\n")[0])
    add_version_option(parser, DISTRIBUTION)
    parser.add_argument("--controller", required=True, help="the controller's admin API URL")
    parser.add_argument("--namespace", help="only this namespace (default: every one)")
    transport = parser.add_mutually_exclusive_group(required=True)
    transport.add_argument(
        "--tls-dir",
        type=Path,
        help="a controller identity (cert-manager's layout) for the pods' internal port "
        "and the admin API",
    )
    transport.add_argument("--insecure", action="store_true", help="plaintext (development)")
    parser.add_argument(
        "--timeout-s", type=float, default=30.0, help="per call, and to reach an offset"
    )
    parser.add_argument(
        "--token-file",
        type=Path,
        help="a file holding a bearer token for the admin API (a cluster with auth on)",
    )
    parser.add_argument("--attempts", type=int, default=5, help="offsets tried per shard")
    parser.add_argument("--report", type=Path, help="also write the findings here (JSON)")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    token = args.token_file.read_text(encoding="utf-8").strip() if args.token_file else None
    auditor = Auditor(args.controller, args.tls_dir, args.timeout_s, args.attempts, token)
    try:
        audits = asyncio.run(auditor.run(args.namespace))
    except AdminApiRefused as error:
        say(f"cairn-audit: {error}", sys.stderr)
        return 2
    found, unchecked = report(audits)
    for divergence in found:
        say(divergence.describe())
    for audit in unchecked:
        say(f"UNCHECKED namespace {audit.namespace} shard {audit.shard}: {audit.problem}")
    compared = [a for a in audits if a.offset is not None]
    replicas = sum(len(a.digests) for a in compared)
    say(
        f"audit: {len(compared)}/{len(audits)} shards compared ({replicas} replicas), "
        f"{len(found)} divergent replica(s)"
    )
    if args.report is not None:
        args.report.write_text(
            json.dumps(
                {
                    "divergences": [
                        {
                            "namespace": d.namespace,
                            "shard": d.shard,
                            "offset": d.offset,
                            "replica": d.replica,
                            "records": d.digest.records,
                            "sha256": d.digest.sha256,
                        }
                        for d in found
                    ],
                    "shards": [
                        {
                            "namespace": a.namespace,
                            "shard": a.shard,
                            "offset": a.offset,
                            "digests": {n: d.sha256 for n, d in a.digests.items()},
                            "problem": a.problem,
                        }
                        for a in audits
                    ],
                },
                indent=2,
            )
            + "\n"
        )
    if found:
        return 1
    return 2 if unchecked else 0


if __name__ == "__main__":
    sys.exit(main())
