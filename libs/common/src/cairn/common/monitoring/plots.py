"""`./dev plots` (`python -m cairn.common.monitoring.plots`): the README's pictures.

A Grafana screenshot needs a Grafana server; this draws the key dashboard panels
instead, from their own PromQL (`dashboards.py`), evaluated by a real Prometheus
that scraped a short local run: `cairn-local` (controller, three storage pods
with their sidecars, the gateway), writes and reads through the gateway, and the
pod leading the most shards killed with SIGKILL half way. Needs `prometheus`
(Debian package) and matplotlib (the dev dependency group).
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from cairn.common.monitoring.alerts import rule_groups
from cairn.common.monitoring.dashboards import all_dashboards
from cairn.common.monitoring.grafana import Panel, substitute
from cairn.common.monitoring.prometheus import PrometheusServer, wait_for
from cairn.common.monitoring.targets import local_target, prometheus_config

SCRAPE_INTERVAL = "1s"
RATE_WINDOW = "5s"
WRITERS = 4
# The launcher's failure detection tuned as the end-to-end tests tune it.
CONTROLLER_ARGS = ("--heartbeat-timeout-ms=1000", "--status-interval-ms=500")
SIDECAR_ARGS = ("--probe-interval-ms=100", "--probe-timeout-ms=300")
# (dashboard uid, panel title) per subplot, per figure file.
FIGURES = {
    "cairn-overview.png": [
        ("cairn-overview", "Writes (operations/s)"),
        ("cairn-overview", "Write latency"),
        ("cairn-replication", "Shards without a leader / under-replicated"),
        ("cairn-replication", "Term of each shard"),
    ],
    "cairn-storage.png": [
        ("cairn-storage", "WAL fsync latency (by pod)"),
        ("cairn-storage", "Follower lag (entries)"),
        ("cairn-storage", "Commit offset"),
        ("cairn-processes", "CPU (cores)"),
    ],
}
METRICS_LINE = re.compile(r"^    (\S+)\s+http://(\S+:\d+)/metrics\s*$", re.MULTILINE)
GATEWAY_LINE = re.compile(r"gateway:\s+(\S+)\s+\(docs")


def find_panel(uid: str, title: str) -> Panel:
    for dashboard in all_dashboards():
        if dashboard.uid == uid:
            for panel in dashboard.panels():
                if panel.title == title:
                    return panel
    raise KeyError(f"{uid} has no panel {title!r}")


class Cluster:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.log = directory / "cairn-local.log"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> str:
        with self.log.open("wb") as out:
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "cairn.controller.local",
                    "--dir",
                    str(self.directory / "cluster"),
                    "--free-ports",
                    "--log-level",
                    "WARNING",
                    # A throwaway cluster on this machine, for its metrics only:
                    # plaintext and no tokens keep the scrape and the load simple.
                    "--insecure",
                    "--no-auth",
                    *(f"--controller-arg={arg}" for arg in CONTROLLER_ARGS),
                    *(f"--sidecar-arg={arg}" for arg in SIDECAR_ARGS),
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        return wait_for(self._banner, 120, "cairn-local started", 0.5)

    def _banner(self) -> str | None:
        assert self.process is not None
        if self.process.poll() is not None:
            raise RuntimeError(f"cairn-local exited: {self.log.read_text()[-2000:]}")
        text = self.log.read_text(errors="replace")
        return text if "Ctrl-C stops it" in text else None

    def processes(self) -> Any:
        import json

        return json.loads((self.directory / "cluster" / "processes.json").read_text())

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def load(gateway_url: str, stop: threading.Event, writer: int) -> None:
    n = 0
    while not stop.is_set():
        url = f"{gateway_url}/v1/namespaces/default/keys//plots/{writer}/{n % 500}"
        for request in (
            urllib.request.Request(url, data=b"value-%d" % n, method="PUT"),
            urllib.request.Request(url),
        ):
            try:
                with urllib.request.urlopen(request, timeout=5) as answer:
                    answer.read()
            except (urllib.error.URLError, OSError):
                time.sleep(0.05)  # a failover: try the next one
        n += 1


def render(prometheus: PrometheusServer, start: float, end: float, out_dir: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    for file, panels in FIGURES.items():
        figure, axes = plt.subplots(2, 2, figsize=(12, 7), constrained_layout=True)
        for axis, (uid, title) in zip(axes.flat, panels, strict=True):
            panel = find_panel(uid, title)
            for query in panel.queries:
                expr = substitute(query.expr, RATE_WINDOW)
                for series in prometheus.query_range(expr, start, end):
                    times = [float(t) - start for t, _ in series["values"]]
                    values = [float(v) for _, v in series["values"]]
                    axis.plot(times, values, label=_legend(query.legend, series["metric"]))
            axis.set_title(f"{title}  ({uid})", fontsize=10)
            axis.set_xlabel("seconds into the run")
            axis.set_ylabel(panel.unit if panel.unit != "short" else "")
            axis.grid(alpha=0.3)
            handles, _ = axis.get_legend_handles_labels()
            if handles:
                axis.legend(fontsize=7, loc="best")
        figure.suptitle("Cairn, local cluster: load through the gateway, leader pod killed")
        path = out_dir / file
        figure.savefig(path, dpi=80)
        plt.close(figure)
        written.append(path)
    return written


def _legend(template: str, labels: dict[str, str]) -> str:
    if not template or template == "__auto":
        return ", ".join(f"{k}={v}" for k, v in sorted(labels.items())) or "value"
    return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: labels.get(m.group(1), ""), template)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cairn.common.monitoring.plots")
    parser.add_argument("--out", type=Path, default=Path("docs/images"))
    parser.add_argument("--seconds", type=float, default=60.0, help="length of the run")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="cairn-plots-") as scratch:
        directory = Path(scratch)
        cluster = Cluster(directory)
        banner = cluster.start()
        prometheus: PrometheusServer | None = None
        stop = threading.Event()
        try:
            addresses = dict(METRICS_LINE.findall(banner))
            gateway = GATEWAY_LINE.search(banner)
            assert gateway is not None, banner
            prometheus = PrometheusServer(
                directory / "prometheus",
                prometheus_config(
                    [local_target(name, address) for name, address in addresses.items()],
                    SCRAPE_INTERVAL,
                    SCRAPE_INTERVAL,
                ),
                rule_groups(),
            )
            prometheus.start()
            wait_for(prometheus.targets_up, 30, "every process scraped")
            start = time.time()
            writers = [
                threading.Thread(target=load, args=(gateway.group(1), stop, n), daemon=True)
                for n in range(WRITERS)
            ]
            for writer in writers:
                writer.start()
            time.sleep(args.seconds / 2)  # a run of fixed length: the plots' time axis
            leaders = prometheus.query('count by (pod) (cairn_shard_role{role="leader"})')
            victim = max(leaders, key=lambda s: float(s["value"][1]))["metric"]["pod"]
            os.kill(cluster.processes()["pods"][victim]["storage"], signal.SIGKILL)
            print(f"killed {victim} at {time.time() - start:.0f} s", flush=True)
            time.sleep(args.seconds / 2)
            end = time.time()
            stop.set()
            for path in render(prometheus, start, end, args.out):
                print(f"wrote {path}")
        finally:
            stop.set()
            if prometheus is not None:
                prometheus.stop()
            cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
