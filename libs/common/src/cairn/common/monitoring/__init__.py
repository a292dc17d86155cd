"""Monitoring as code: Grafana dashboards, Prometheus alert rules, the scrape label
scheme and the kube-prometheus-stack component, all generated from this package
(`python -m cairn.common.monitoring`), and proven against a real Prometheus
scraping a real cluster (tests/e2e/test_monitoring.py).

    targets.py     the labels every scrape carries; a local prometheus.yml
    grafana.py     a small dashboard JSON builder
    dashboards.py  the five dashboards
    alerts.py      the alert rules (thresholds as parameters)
    kubernetes.py  PodMonitors, PrometheusRule, the kustomize component
    promql.py      the metric and label names an expression uses (for the checks)
    files.py       which files are generated, and the check
"""
