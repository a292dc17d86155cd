"""Which labels a scrape of Cairn carries, wherever it runs: the one scheme the
dashboards and alerts may rely on.

Every scrape target gets
- `job`: the component (`cairn-storage`, `cairn-health`, `cairn-controller`,
  `cairn-gateway`), whatever the Prometheus job is called;
- `pod`: the Kubernetes pod (locally: the process, `storage-0`; a health sidecar
  shares its storage pod's name, as it shares its pod on Kubernetes);
- `container`: the container within the pod (`storage`, `health`, `controller`,
  `gateway`);
- `instance`: Prometheus' own `host:port`.

Cairn's own metrics carry `namespace`: the Cairn namespace. On Kubernetes,
prometheus-operator also sets a target label `namespace` (the Kubernetes one); the
scrape would then rename Cairn's to `exported_namespace`, and every panel filtering
on `namespace` would show the wrong thing (Oxia's dashboards have this bug). So the
monitors move the Kubernetes namespace to `kubernetes_namespace` and drop the
target's `namespace` (see `kubernetes.py`); locally there is none to move.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

JOB_STORAGE = "cairn-storage"
JOB_HEALTH = "cairn-health"
JOB_CONTROLLER = "cairn-controller"
JOB_GATEWAY = "cairn-gateway"
JOBS = (JOB_STORAGE, JOB_HEALTH, JOB_CONTROLLER, JOB_GATEWAY)

# Label names the scrape adds to every series (besides the metrics' own).
TARGET_LABELS = ("job", "pod", "container", "instance")

# Container (and metrics port name) per job; the port names are what the
# Kubernetes monitors select (kubernetes.py), with the conventional port numbers.
CONTAINERS = {
    JOB_STORAGE: "storage",
    JOB_HEALTH: "health",
    JOB_CONTROLLER: "controller",
    JOB_GATEWAY: "gateway",
}
METRICS_PORT_NAMES = {
    JOB_STORAGE: "metrics",
    JOB_HEALTH: "health-metrics",
    JOB_CONTROLLER: "metrics",
    JOB_GATEWAY: "metrics",
}


@dataclass(frozen=True)
class Target:
    """One process to scrape: its address and the labels of the scheme above."""

    address: str
    job: str
    pod: str

    @property
    def container(self) -> str:
        return CONTAINERS[self.job]


def local_target(process: str, address: str) -> Target:
    """A `cairn-local` process (named as in its processes.json/banner) as a target."""
    if process == "controller":
        return Target(address, JOB_CONTROLLER, process)
    if process == "gateway":
        return Target(address, JOB_GATEWAY, process)
    if process.endswith("-health"):
        return Target(address, JOB_HEALTH, process.removesuffix("-health"))
    if process.startswith("storage-"):
        return Target(address, JOB_STORAGE, process)
    raise ValueError(f"not a cairn-local process: {process!r}")


@dataclass(frozen=True)
class ScrapeConnection:
    """How Prometheus reaches every /metrics endpoint: HTTPS, the server checked
    against `ca_file` (the cluster's CA). The endpoints ask for no client
    certificate (telemetry.py), so none is presented."""

    ca_file: Path

    def fields(self) -> dict[str, Any]:
        """The scrape_config fields of this connection (its credentials belong here too)."""
        return {"scheme": "https", "tls_config": {"ca_file": str(self.ca_file)}}


def prometheus_config(
    targets: list[Target],
    scrape_interval: str = "15s",
    evaluation_interval: str = "15s",
    rule_files: list[str] | None = None,
    connection: ScrapeConnection | None = None,
) -> dict[str, Any]:
    """A prometheus.yml (as a dict) scraping `targets` with the scheme's labels;
    over `connection`, or plain HTTP without one."""
    return {
        "global": {
            "scrape_interval": scrape_interval,
            "scrape_timeout": scrape_interval,
            "evaluation_interval": evaluation_interval,
        },
        "rule_files": list(rule_files or []),
        "scrape_configs": [
            {
                "job_name": job,
                **(connection.fields() if connection is not None else {}),
                "static_configs": [
                    {
                        "targets": [target.address],
                        "labels": {"pod": target.pod, "container": target.container},
                    }
                    for target in targets
                    if target.job == job
                ],
            }
            for job in JOBS
            if any(target.job == job for target in targets)
        ],
    }
