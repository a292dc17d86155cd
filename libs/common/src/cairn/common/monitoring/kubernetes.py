"""The kube-prometheus-stack packaging: a kustomize component with PodMonitors,
the dashboards as ConfigMaps (`grafana_dashboard: "1"`, which Grafana's dashboard
sidecar loads) and the alerts as a PrometheusRule.

What it expects of the pods (there is no Kubernetes deployment yet, issue 41):
- labels `app.kubernetes.io/name: cairn` and `app.kubernetes.io/component` one of
  `storage`, `controller`, `gateway`;
- containers `storage` (with the `health` sidecar), `controller`, `gateway`, each
  exposing its `/metrics` on a named container port: `metrics` (storage 9090,
  controller 9091, gateway 9092) and `health-metrics` (the sidecar, 9093), and
  started with `--metrics-host 0.0.0.0` (the default, 127.0.0.1, is not reachable
  from Prometheus);
- a Prometheus (kube-prometheus-stack) selecting monitors and rules labelled
  `release: kube-prometheus-stack` (its default for a release of that name: patch
  the label for another).

The monitors' relabelings give the label scheme of `targets.py`: `job` is the
component, and the Kubernetes namespace goes to `kubernetes_namespace` so that
Cairn's own `namespace` label (the Cairn namespace) reaches Prometheus unrenamed.
prometheus-operator appends these relabelings after its own (which set
`namespace`, `pod`, `container` and `job`), so they override them.
"""

from __future__ import annotations

from typing import Any

from cairn.common.monitoring.targets import (
    CONTAINERS,
    JOB_CONTROLLER,
    JOB_GATEWAY,
    JOB_HEALTH,
    JOB_STORAGE,
    METRICS_PORT_NAMES,
)

APP_LABEL = "app.kubernetes.io/name"
COMPONENT_LABEL = "app.kubernetes.io/component"
APP = "cairn"
RELEASE_LABELS = {"release": "kube-prometheus-stack"}
SCRAPE_INTERVAL = "15s"
RULE_NAME = "cairn-alerts"
DASHBOARDS_DIR = "dashboards"

# (PodMonitor name, pod component, jobs scraped in those pods)
MONITORS = (
    ("cairn-storage", "storage", (JOB_STORAGE, JOB_HEALTH)),
    ("cairn-controller", "controller", (JOB_CONTROLLER,)),
    ("cairn-gateway", "gateway", (JOB_GATEWAY,)),
)


def _endpoint(job: str) -> dict[str, Any]:
    return {
        "port": METRICS_PORT_NAMES[job],
        "path": "/metrics",
        "interval": SCRAPE_INTERVAL,
        "relabelings": [
            {
                "sourceLabels": ["__meta_kubernetes_namespace"],
                "targetLabel": "kubernetes_namespace",
            },
            {"action": "labeldrop", "regex": "namespace"},
            {"targetLabel": "job", "replacement": job},
            {"targetLabel": "container", "replacement": CONTAINERS[job]},
        ],
    }


def pod_monitors() -> list[dict[str, Any]]:
    return [
        {
            "apiVersion": "monitoring.coreos.com/v1",
            "kind": "PodMonitor",
            "metadata": {"name": name, "labels": {APP_LABEL: APP, **RELEASE_LABELS}},
            "spec": {
                "selector": {"matchLabels": {APP_LABEL: APP, COMPONENT_LABEL: component}},
                "podMetricsEndpoints": [_endpoint(job) for job in jobs],
            },
        }
        for name, component, jobs in MONITORS
    ]


def prometheus_rule(groups: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {"name": RULE_NAME, "labels": {APP_LABEL: APP, **RELEASE_LABELS}},
        "spec": groups,
    }


def kustomization(dashboard_uids: list[str]) -> dict[str, Any]:
    return {
        "apiVersion": "kustomize.config.k8s.io/v1alpha1",
        "kind": "Component",
        "resources": ["podmonitors.yaml", "prometheusrule.yaml"],
        "configMapGenerator": [
            {
                "name": f"{uid}-dashboard",
                "files": [f"{DASHBOARDS_DIR}/{uid}.json"],
                "options": {
                    "disableNameSuffixHash": True,
                    "labels": {"grafana_dashboard": "1", APP_LABEL: APP},
                    "annotations": {"grafana_folder": "Cairn"},
                },
            }
            for uid in dashboard_uids
        ],
    }
