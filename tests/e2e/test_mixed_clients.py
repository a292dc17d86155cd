"""Clients that hash keys differently: the `oxia` 0.2.1 Python client routes by XXH64,
Cairn's client, CLI and gateway by XXH3 unless told otherwise.

What the oxia client wrote is on the shards its own hash chose; Cairn's tools in the
`xxh64` mode read all of it, and the storage pod counts (and logs) the writes that
arrived on a shard XXH3 does not route their keys to.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Callable

import httpx
import oxia
import pytest

from cairn.client import errors
from cairn.client.client import AsyncClient
from cairn.client.options import ClientOptions
from cairn.common.hashing import KeyHash, split_hash_space
from gateway.helpers import GatewayProcess
from support.processes import StandaloneProcess
from support.promtool import samples, scrape

pytestmark = pytest.mark.e2e

SHARDS = 3
KEYS = [f"/mixed/k{i}" for i in range(12)]
METRICS_PREFIX = "cairn-storage metrics on http://"


def moved_keys() -> list[str]:
    """The keys XXH64 and XXH3 put on different shards of a 3-shard namespace."""
    ranges = split_hash_space(SHARDS)

    def shard(hash_function: KeyHash, key: str) -> int:
        return next(i for i, r in enumerate(ranges) if r.contains(hash_function(key)))

    return [k for k in KEYS if shard(KeyHash.XXH3, k) != shard(KeyHash.XXH64, k)]


async def read_all(address: str, key_hash: KeyHash) -> dict[str, bytes | None]:
    client = await AsyncClient.connect([address], options=ClientOptions(key_hash=key_hash))
    found: dict[str, bytes | None] = {}
    async with client:
        for key in KEYS:
            try:
                found[key] = (await client.get(key)).value
            except errors.KeyNotFound:
                found[key] = None
    return found


def test_data_the_oxia_client_wrote_reads_back_through_the_xxh64_mode(
    standalone_factory: Callable[..., StandaloneProcess],
) -> None:
    server = standalone_factory(SHARDS)
    moved = moved_keys()
    assert 0 < len(moved) < len(KEYS)
    with oxia.Client(server.address) as client:
        for key in KEYS:
            client.put(key, key.encode())
    expected = {key: key.encode() for key in KEYS}

    # Routed by XXH3, the keys the two hashes disagree on are not found.
    by_xxh3 = asyncio.run(read_all(server.address, KeyHash.XXH3))
    assert [k for k, v in by_xxh3.items() if v is None] == moved
    # The client library in the xxh64 mode finds every one.
    assert asyncio.run(read_all(server.address, KeyHash.XXH64)) == expected

    # The CLI, by flag and by environment.
    for key in moved:
        done = subprocess.run(
            [sys.executable, "-m", "cairn.client.cli", "--address", server.address,
             "--key-hash", "xxh64", "--json", "get", key],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["key"] == key

    # The gateway, for the namespace set to xxh64.
    gateway = GatewayProcess([server.address], extra_args=["--key-hash", "default=xxh64"])
    gateway.start()
    try:
        with httpx.Client(base_url=gateway.url, timeout=30) as http:
            for key in KEYS:
                answer = http.get(f"/v1/namespaces/default/keys/{key}")
                assert answer.status_code == 200, (key, answer.text)
                assert answer.content == key.encode()
    finally:
        gateway.stop()

    # The pod counted each misrouted write (the oxia client sends one put per
    # request) and said so in its log.
    metrics_line = next(line for line in server.output if line.startswith(METRICS_PREFIX))
    address = metrics_line[len(METRICS_PREFIX) :].split("/")[0]
    counted = samples(scrape(address), "cairn_requests_misrouted_total")
    assert sum(counted.values()) == len(moved)
    assert any("XXH3 routes their keys elsewhere" in line for line in server.output)


def test_cairn_clients_routing_by_xxh3_are_never_counted_as_misrouted(
    standalone_factory: Callable[..., StandaloneProcess],
) -> None:
    server = standalone_factory(SHARDS)

    async def write() -> None:
        client = await AsyncClient.connect([server.address])
        async with client:
            for key in KEYS:
                await client.put(key, b"v")

    asyncio.run(write())
    metrics_line = next(line for line in server.output if line.startswith(METRICS_PREFIX))
    address = metrics_line[len(METRICS_PREFIX) :].split("/")[0]
    counted = samples(scrape(address), "cairn_requests_misrouted_total")
    assert sum(counted.values()) == 0
