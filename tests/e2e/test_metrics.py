"""Every process of a local cluster (`cairn-local`) serves `/metrics`: the launcher
prints each address, promtool accepts each page, and the key metrics are there,
labelled, and move with a write through the gateway."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest

from gateway.helpers import LocalClusterProcess, wait_until
from support.promtool import check_metrics, samples, scrape

pytestmark = pytest.mark.e2e

METRICS_LINE = re.compile(r"^    (\S+)\s+http://(\S+:\d+)/metrics\s*$")


def metrics_addresses(output: str) -> dict[str, str]:
    found = {}
    for line in output.splitlines():
        match = METRICS_LINE.match(line)
        if match:
            found[match.group(1)] = match.group(2)
    return found


def test_every_process_serves_metrics(tmp_path: Path) -> None:
    cluster = LocalClusterProcess(tmp_path / "cluster", pods=3, shards=2)
    banner = cluster.start()
    try:
        addresses = metrics_addresses(cluster.log_text())
        expected = {"controller", "gateway"} | {
            f"storage-{n}{suffix}" for n in range(3) for suffix in ("", "-health")
        }
        assert set(addresses) == expected, cluster.log_text()
        assert len(set(addresses.values())) == len(addresses)

        with httpx.Client(base_url=banner.gateway_url, timeout=30.0) as http:
            wait_until(lambda: http.get("/readyz").status_code == 200, 60.0)
            for n in range(5):
                answer = http.put(f"/v1/namespaces/default/keys//metrics/{n}", content=b"v")
                assert answer.status_code in (200, 201), answer.text
            assert http.get("/v1/namespaces/default/keys//metrics/0").status_code == 200

        pages = {name: scrape(address) for name, address in addresses.items()}
        for name, page in pages.items():
            try:
                check_metrics(page)
            except AssertionError as error:
                raise AssertionError(f"{name}: {error}") from None
            assert samples(page, "process_cpu_time_seconds_total"), name

        controller = pages["controller"]
        assert samples(controller, "cairn_controller_leader") == {frozenset(): 1.0}
        terms = samples(controller, "cairn_controller_shard_term")
        assert len(terms) == 2 and all(term >= 1 for term in terms.values()), terms
        assert samples(controller, "cairn_controller_elections_total")
        assert len(samples(controller, "cairn_controller_node_health")) == 3

        # The five puts were taken in by the shards' leaders, spread over the pods.
        writes = sum(
            sum(samples(pages[f"storage-{n}"], "cairn_shard_write_operations_total").values())
            for n in range(3)
        )
        assert writes >= 5
        roles = [
            dict(labels)["role"]
            for n in range(3)
            for labels in samples(pages[f"storage-{n}"], "cairn_shard_role")
        ]
        assert roles.count("leader") == 2 and roles.count("follower") == 4, roles

        # The servers froze what startup built (cairn.common.startup_objects): the
        # full collections under load would otherwise scan it and stall the loop.
        for name in ("gateway", "storage-0", "storage-1", "storage-2"):
            frozen = samples(pages[name], "cairn_process_gc_frozen_objects")
            assert frozen and min(frozen.values()) > 10_000, (name, frozen)

        gateway = pages["gateway"]
        counts = samples(gateway, "http_server_request_duration_seconds_count")
        puts = sum(
            value
            for labels, value in counts.items()
            if ("http_request_method", "PUT") in labels
            and dict(labels)["http_route"].startswith("/v1/namespaces/{namespace}/keys/")
        )
        assert puts == 5, counts
        assert samples(gateway, "cairn_gateway_sse_streams") == {frozenset(): 0.0}

        for n in range(3):
            probes = samples(pages[f"storage-{n}-health"], "cairn_health_probes_total")
            assert probes[frozenset({("result", "ok")})] > 0
    finally:
        cluster.stop()
