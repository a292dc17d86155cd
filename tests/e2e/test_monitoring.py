"""The dashboards and alerts, proven against what Cairn really emits.

A local cluster (`cairn-local`: controller, three storage pods with their health
sidecars, the gateway) secured as by default (its local CA, TLS on every port) and
a real Prometheus scraping every process over HTTPS with the label scheme of
`cairn.common.monitoring.targets`; load through the gateway; the
pod leading shards is killed with SIGKILL while another is hung (SIGSTOP), so
that the failover lasts seconds. Then every PromQL expression of every
dashboard panel, dashboard variable and alert rule is evaluated over Prometheus'
HTTP API: it parses, it names only metrics and labels the scrapes hold, and each
panel returns data over the run. The "shard without a leader" alert (its
expression as shipped, with a `for` of 1 s) fires during the failover and
resolves after it; `promtool check metrics` accepts every endpoint. Each
process's certificate expiry series carry its certificate files' notAfter.
"""

from __future__ import annotations

import math
import os
import re
import signal
import ssl
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from cryptography import x509

from cairn.common.monitoring.alerts import AlertSettings, alerts, rule_groups
from cairn.common.monitoring.dashboards import all_dashboards
from cairn.common.monitoring.grafana import substitute
from cairn.common.monitoring.prometheus import PrometheusServer, wait_for
from cairn.common.monitoring.promql import Names, names, variable_names
from cairn.common.monitoring.targets import ScrapeConnection, local_target, prometheus_config
from gateway.helpers import LocalClusterProcess
from support.promtool import check_metrics, promtool, scrape

pytestmark = pytest.mark.e2e

# Short, for a short test; not shorter: a scrape that takes longer than this
# (a loaded machine) fails, and the pod reads as down.
SCRAPE_INTERVAL = "1s"
RATE_WINDOW = "10s"  # $__rate_interval: ten scrapes
LEADERLESS_FOR = "1s"
METRICS_LINE = re.compile(r"^    (\S+)\s+https://(\S+:\d+)/metrics\s*$")
# Panels of events this run does not cause: their series exist (checked like all
# others) but hold no finite value, as a dashboard shows "no data" between events.
EVENTLESS_PANELS = {
    "Snapshot duration p99",  # no follower falls behind the WAL's retention here
}


def metrics_addresses(output: str) -> dict[str, str]:
    found = {}
    for line in output.splitlines():
        match = METRICS_LINE.match(line)
        if match:
            found[match.group(1)] = match.group(2)
    return found


class Load:
    """Writes, reads and lists through the gateway on a thread, until stopped;
    failures (a failover) are counted, not raised."""

    def __init__(self, gateway_url: str, verify: ssl.SSLContext) -> None:
        self.url = gateway_url
        self.verify = verify
        self.done = threading.Event()
        self.ok = 0
        self.failed = 0
        # Writers at once, so that the storage pods fold concurrent requests.
        self.threads = [threading.Thread(target=self._run, daemon=True) for _ in range(3)]

    def _run(self) -> None:
        with httpx.Client(base_url=self.url, verify=self.verify, timeout=5.0) as http:
            n = threading.get_ident() % 1000
            while not self.done.is_set():
                key = f"/v1/namespaces/default/keys//load/{n % 200}"
                try:
                    answers = [
                        http.put(key, content=b"value-%d" % n),
                        http.get(key),
                    ]
                    if n % 20 == 0:
                        answers.append(http.get("/v1/namespaces/default/keys"))
                    if all(a.status_code < 500 for a in answers):
                        self.ok += 1
                    else:
                        self.failed += 1
                except httpx.HTTPError:
                    self.failed += 1
                n += 1

    def __enter__(self) -> Load:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.done.set()
        for thread in self.threads:
            thread.join(10)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalClusterProcess]:
    cluster = LocalClusterProcess(tmp_path / "cluster", pods=3, shards=3, tls=True)
    cluster.start()
    try:
        yield cluster
    finally:
        # A loaded machine (others' tests too) can take over 30 s to stop seven
        # processes; SIGKILL of the launcher would leave them running.
        cluster.stop(timeout_s=120)


def check_names(prometheus_names: dict[str, set[str]], found: Names, where: str) -> None:
    """Every metric exists in the scrapes, every label it is filtered or grouped by too."""
    every_label: set[str] = set()
    for selector in found.selectors:
        assert selector.metric in prometheus_names, f"{where}: no metric {selector.metric}"
        labels = prometheus_names[selector.metric]
        missing = selector.labels - labels
        assert not missing, f"{where}: {selector.metric} has no label {sorted(missing)}"
        every_label |= labels
    missing = found.grouping_labels - every_label
    assert not missing, f"{where}: no metric of it has label {sorted(missing)}"


def not_after_s(certificate: Path) -> float:
    return x509.load_pem_x509_certificate(certificate.read_bytes()).not_valid_after_utc.timestamp()


def finite(result: list[dict[str, Any]]) -> bool:
    return any(math.isfinite(float(value)) for series in result for _, value in series["values"])


def test_dashboards_and_alerts_hold_against_a_real_prometheus(
    cluster: LocalClusterProcess, tmp_path: Path
) -> None:
    promtool()  # installs Debian's prometheus (server and promtool) when it may
    started = time.time()
    addresses = metrics_addresses(cluster.log_text())
    assert len(addresses) == 8, cluster.log_text()
    settings = AlertSettings(leaderless_for=LEADERLESS_FOR)
    prometheus = PrometheusServer(
        tmp_path / "prometheus",
        prometheus_config(
            [local_target(name, address) for name, address in sorted(addresses.items())],
            scrape_interval=SCRAPE_INTERVAL,
            evaluation_interval=SCRAPE_INTERVAL,
            connection=ScrapeConnection(cluster.ca_file),
        ),
        rule_groups(settings),
    )
    prometheus.start()
    try:
        wait_for(prometheus.targets_up, 30, "every process scraped")
        leaderless = 'ALERTS{alertname="CairnShardWithoutLeader", alertstate="firing"}'
        tls = cluster.client_ssl_context()
        with httpx.Client(base_url=cluster.banner.gateway_url, verify=tls, timeout=10.0) as http:
            wait_for(lambda: http.get("/readyz").status_code == 200, 60, "gateway ready")
        with Load(cluster.banner.gateway_url, tls) as load:
            try:
                wait_for(
                    lambda: (prometheus.value("sum(cairn_shard_write_operations_total)") or 0) > 50,
                    60,
                    "writes counted",
                )
            except TimeoutError:
                raise AssertionError(
                    f"load ok {load.ok} failed {load.failed}; up: {prometheus.query('up')}"
                ) from None
            assert not prometheus.query(leaderless)
            # A pod leading shards dies (SIGKILL; the launcher restarts it) while
            # another is hung (SIGSTOP): its shards have no majority to elect a new
            # leader until the killed pod is back. (A kill alone fails over in about
            # half a second here, too short for any alert to fire, rightly.)
            leaders = prometheus.query('count by (pod) (cairn_shard_role{role="leader"})')
            victim = max(leaders, key=lambda s: float(s["value"][1]))["metric"]["pod"]
            pods = cluster.processes()["pods"]
            hung = next(name for name in sorted(pods) if name != victim)
            os.kill(pods[hung]["storage"], signal.SIGSTOP)
            try:
                os.kill(pods[victim]["storage"], signal.SIGKILL)
                killed_at = time.monotonic()
                wait_for(lambda: prometheus.query(leaderless), 60, "the leaderless alert firing")
                fired_after_s = time.monotonic() - killed_at
            finally:
                os.kill(pods[hung]["storage"], signal.SIGCONT)
            wait_for(
                lambda: (
                    not prometheus.query(leaderless)
                    and prometheus.value("sum(cairn_controller_shards_without_leader)") == 0
                ),
                60,
                "the leaderless alert resolved",
            )
            # Writes flow again through new leaders, and Prometheus has seen them.
            after = prometheus.value("sum(cairn_shard_write_operations_total)") or 0
            wait_for(
                lambda: (
                    (prometheus.value("sum(cairn_shard_write_operations_total)") or 0) > after + 50
                ),
                60,
                "writes after the failover",
            )
            assert prometheus.value("sum(cairn_controller_elections_total)")
        assert load.ok > 100, (load.ok, load.failed)
        end = time.time()

        # Every name in the scrapes, with its labels.
        present = {name: prometheus.label_names(name) for name in prometheus.metric_names()}
        checked_panels = 0
        only_nan: list[str] = []
        for dashboard in all_dashboards():
            for variable in dashboard.variables:
                where = f"{dashboard.uid} variable {variable.name}"
                check_names(present, variable_names(substitute(variable.query)), where)
            for panel in dashboard.panels():
                where = f"{dashboard.uid} / {panel.title}"
                results = []
                for query in panel.queries:
                    expr = substitute(query.expr, RATE_WINDOW)
                    check_names(present, names(expr), where)
                    result = prometheus.query_range(expr, started, end)
                    assert result, f"{where}: no data for {expr}"
                    results.append(result)
                if panel.title not in EVENTLESS_PANELS and not any(finite(r) for r in results):
                    only_nan.append(where)
                checked_panels += 1
        for alert in alerts(settings):
            check_names(present, names(alert.expr), alert.name)
            prometheus.query_range(alert.expr, started, end)  # parses and evaluates
        rules = prometheus.api("rules")["groups"][0]["rules"]
        assert {r["name"] for r in rules} == {a.name for a in alerts()}
        assert all(r["health"] == "ok" for r in rules), rules
        assert checked_panels >= 50
        assert not only_nan, f"panels with no finite value over the run: {only_nan}"

        # promtool accepts every endpoint's page (the killed pod's too, once back).
        wait_for(prometheus.targets_up, 60, "every process scraped again")
        for name, address in addresses.items():
            try:
                check_metrics(scrape(address, ca_file=cluster.ca_file))
            except AssertionError as error:
                raise AssertionError(f"{name}: {error}") from None

        # Each process reports the notAfter of its own certificate files.
        process_at = {address: name for name, address in addresses.items()}
        reported = {
            (process_at[s["metric"]["instance"]], s["metric"]["certificate"]): float(s["value"][1])
            for s in prometheus.query("cairn_tls_certificate_expiry_seconds")
        }
        assert reported == {
            (name, file): not_after_s(cluster.directory / "tls" / name / file)
            for name in addresses
            for file in ("tls.crt", "ca.crt")
        }
        print(
            f"panels {checked_panels}, load ok {load.ok} failed {load.failed}, "
            f"leaderless alert fired {fired_after_s:.1f} s after the kill, "
            f"run {time.time() - started:.0f} s"
        )
    finally:
        prometheus.stop()
