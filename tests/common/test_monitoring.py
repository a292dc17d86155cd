"""The monitoring files: generated from the code (and committed as generated),
the alert rules valid and their unit tests passing under promtool, and the
kustomize component consistent with what the components expose. Whether the
dashboards' and rules' names exist in real scrapes: tests/e2e/test_monitoring.py."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import yaml

from cairn.common import telemetry
from cairn.common.certs import CertificateAuthority
from cairn.common.monitoring import kubernetes, targets
from cairn.common.monitoring.alerts import AlertSettings, alerts, rule_groups
from cairn.common.monitoring.dashboards import all_dashboards
from cairn.common.monitoring.files import COMPONENT_DIR, RULES_FILE, RULES_TEST_FILE, differences
from cairn.common.monitoring.grafana import substitute
from cairn.common.monitoring.promql import names, variable_names
from support.manifests import tool
from support.promtool import promtool

ROOT = Path(__file__).resolve().parents[2]


def test_committed_files_are_what_the_code_generates() -> None:
    assert differences(ROOT) == [], "run: python -m cairn.common.monitoring"


def test_promtool_checks_the_rules_and_runs_their_unit_tests() -> None:
    tool = promtool()
    checked = subprocess.run(
        [tool, "check", "rules", str(ROOT / RULES_FILE)], capture_output=True, text=True
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    tested = subprocess.run(
        [tool, "test", "rules", RULES_TEST_FILE.name],
        cwd=ROOT / RULES_TEST_FILE.parent,
        capture_output=True,
        text=True,
    )
    assert tested.returncode == 0, tested.stdout + tested.stderr


def test_every_alert_has_a_unit_test() -> None:
    text = (ROOT / RULES_TEST_FILE).read_text()
    tested = {
        case["alertname"]
        for test in yaml.safe_load(text)["tests"]
        for case in test["alert_rule_test"]
        if case["exp_alerts"]
    }
    assert tested == {alert.name for alert in alerts()}


def test_settings_change_waits_and_thresholds_not_expressions() -> None:
    short = AlertSettings(leaderless_for="1s")
    default = {a.name: a for a in alerts()}
    for alert in alerts(short):
        assert alert.expr == default[alert.name].expr
    assert rule_groups(short)["groups"][0]["rules"][0]["for"] == "1s"


def test_dashboards_have_unique_ids_variables_and_parseable_queries() -> None:
    dashboards = all_dashboards()
    assert len({d.uid for d in dashboards}) == len(dashboards) == 5
    for dashboard in dashboards:
        panel_titles = [p.title for p in dashboard.panels()]
        assert len(set(panel_titles)) == len(panel_titles), dashboard.uid
        for panel in dashboard.panels():
            for query in panel.queries:
                found = names(substitute(query.expr))
                assert found.metrics, (dashboard.uid, panel.title, query.expr)
        for variable in dashboard.variables:
            assert variable_names(variable.query).metrics
        document = json.loads(
            (ROOT / COMPONENT_DIR / "dashboards" / f"{dashboard.uid}.json").read_text()
        )
        variables = [v["name"] for v in document["templating"]["list"]]
        assert variables[0] == "datasource"
        assert all(
            p.get("datasource", {}).get("uid") == "${datasource}"
            for p in document["panels"]
            if p["type"] != "row"
        )


def test_promql_names() -> None:
    found = names(
        "histogram_quantile(0.99, sum by (pod, le) "
        '(rate(x_bucket{job="a", pod=~"b"}[5m] offset 1m))) > 0.1 '
        "unless on (pod) group_left (node) max(y) by (job)"
    )
    assert found.metrics == {"x_bucket", "y"}
    assert {s.metric: s.labels for s in found.selectors}["x_bucket"] == {"job", "pod"}
    assert found.grouping_labels == {"pod", "le", "node", "job"}
    assert variable_names('label_values(z{a=~"$a"}, b)').grouping_labels == {"b"}


def test_a_scrape_connection_scrapes_every_job_over_https_checked_by_the_ca(
    tmp_path: Path,
) -> None:
    processes = ("controller", "gateway", "storage-0", "storage-0-health")
    local = [
        targets.local_target(name, f"127.0.0.1:{9100 + n}") for n, name in enumerate(processes)
    ]
    assert all(
        "scheme" not in job and "tls_config" not in job
        for job in targets.prometheus_config(local)["scrape_configs"]
    )
    CertificateAuthority.create_or_load(tmp_path / "ca")
    ca_file = tmp_path / "ca" / "ca.crt"
    config = targets.prometheus_config(local, connection=targets.ScrapeConnection(ca_file))
    jobs = config["scrape_configs"]
    assert {job["job_name"] for job in jobs} == set(targets.JOBS)
    for job in jobs:
        assert job["scheme"] == "https"
        assert job["tls_config"] == {"ca_file": str(ca_file)}
    # Prometheus itself takes the file: the fields are its own, the CA readable.
    config_file = tmp_path / "prometheus.yml"
    config_file.write_text(yaml.safe_dump(config))
    checked = subprocess.run(
        [promtool(), "check", "config", str(config_file)], capture_output=True, text=True
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_kustomize_component_matches_what_the_components_expose() -> None:
    component = ROOT / COMPONENT_DIR
    kustomization = yaml.safe_load((component / "kustomization.yaml").read_text())
    assert kustomization["kind"] == "Component"
    for resource in kustomization["resources"]:
        assert (component / resource).is_file(), resource
    generated = kustomization["configMapGenerator"]
    assert {g["name"] for g in generated} == {f"{d.uid}-dashboard" for d in all_dashboards()}
    for generator in generated:
        assert generator["options"]["labels"]["grafana_dashboard"] == "1"
        for file in generator["files"]:
            json.loads((component / file).read_text())

    monitors = list(yaml.safe_load_all((component / "podmonitors.yaml").read_text()))
    jobs = {}
    for monitor in monitors:
        assert monitor["kind"] == "PodMonitor"
        for endpoint in monitor["spec"]["podMetricsEndpoints"]:
            relabel = {r.get("targetLabel"): r for r in endpoint["relabelings"]}
            job = relabel["job"]["replacement"]
            jobs[job] = endpoint["port"]
            # Cairn's `namespace` label must reach Prometheus unrenamed.
            assert {"action": "labeldrop", "regex": "namespace"} in endpoint["relabelings"]
            assert relabel["container"]["replacement"] == targets.CONTAINERS[job]
    assert jobs == targets.METRICS_PORT_NAMES
    # The conventional ports, in the documentation of what the component expects.
    for port in (
        telemetry.METRICS_PORT_STORAGE,
        telemetry.METRICS_PORT_CONTROLLER,
        telemetry.METRICS_PORT_GATEWAY,
        telemetry.METRICS_PORT_HEALTH,
    ):
        assert str(port) in (kubernetes.__doc__ or "")

    rule = yaml.safe_load((component / "prometheusrule.yaml").read_text())
    assert rule["kind"] == "PrometheusRule"
    assert rule["spec"] == rule_groups()


def test_kustomize_builds_the_component(tmp_path: Path) -> None:
    # kustomize refuses components outside the kustomization's root: link it in.
    (tmp_path / "monitoring").symlink_to(ROOT / COMPONENT_DIR)
    (tmp_path / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
        "components:\n- monitoring\n"
    )
    built = subprocess.run(
        [tool("kubectl"), "kustomize", str(tmp_path)], capture_output=True, text=True, timeout=60
    )
    assert built.returncode == 0, built.stderr
    kinds = sorted(doc["kind"] for doc in yaml.safe_load_all(built.stdout))
    assert kinds == sorted(["ConfigMap"] * 5 + ["PodMonitor"] * 3 + ["PrometheusRule"])
