"""A small builder of Grafana dashboard JSON (schema 39): just what Cairn's
dashboards use (time series and stat panels on a Prometheus datasource, rows,
query variables). Plain dicts out, so the output is diffable JSON.

Panels flow left to right, `width` of Grafana's 24 columns each, wrapping to a
new line; a row starts a new line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
GRID_COLUMNS = 24
SCHEMA_VERSION = 39


@dataclass(frozen=True)
class Query:
    expr: str
    legend: str = ""


@dataclass(frozen=True)
class Panel:
    title: str
    queries: tuple[Query, ...]
    unit: str = "short"
    kind: str = "timeseries"  # or "stat"
    description: str = ""
    width: int = 8
    height: int = 8


@dataclass(frozen=True)
class Row:
    title: str


@dataclass(frozen=True)
class Variable:
    """A query variable: `label_values(metric{...}, label)`."""

    name: str
    label: str
    query: str
    multi: bool = True


@dataclass
class Dashboard:
    uid: str
    title: str
    description: str
    variables: list[Variable]
    items: list[Panel | Row] = field(default_factory=list)
    tags: tuple[str, ...] = ("cairn",)

    def panels(self) -> list[Panel]:
        return [item for item in self.items if isinstance(item, Panel)]


def panel(title: str, *queries: Query | str, **options: Any) -> Panel:
    found = tuple(q if isinstance(q, Query) else Query(q) for q in queries)
    return Panel(title, found, **options)


def _panel_json(item: Panel, panel_id: int, x: int, y: int) -> dict[str, Any]:
    targets = [
        {
            "datasource": DATASOURCE,
            "expr": query.expr,
            "legendFormat": query.legend or "__auto",
            "range": True,
            "refId": chr(ord("A") + index),
        }
        for index, query in enumerate(item.queries)
    ]
    document: dict[str, Any] = {
        "id": panel_id,
        "type": item.kind,
        "title": item.title,
        "description": item.description,
        "datasource": DATASOURCE,
        "gridPos": {"h": item.height, "w": item.width, "x": x, "y": y},
        "targets": targets,
        "fieldConfig": {"defaults": {"unit": item.unit}, "overrides": []},
    }
    if item.kind == "timeseries":
        document["options"] = {
            "legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
            "tooltip": {"mode": "multi", "sort": "desc"},
        }
    else:
        document["options"] = {
            "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
            "colorMode": "value",
            "graphMode": "area",
        }
    return document


def _variable_json(variable: Variable) -> dict[str, Any]:
    return {
        "name": variable.name,
        "label": variable.label,
        "type": "query",
        "datasource": DATASOURCE,
        "query": {"query": variable.query, "refId": f"{variable.name}-values"},
        "definition": variable.query,
        "refresh": 2,  # on time range change
        "includeAll": True,
        "allValue": ".*",
        "multi": variable.multi,
        "sort": 3,  # numerically ascending (shards)
        "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
    }


def to_json(dashboard: Dashboard) -> dict[str, Any]:
    panels: list[dict[str, Any]] = []
    x = y = 0
    line_height = 0
    for panel_id, item in enumerate(dashboard.items, start=1):
        if isinstance(item, Row):
            if x:
                y, x = y + line_height, 0
            panels.append(
                {
                    "id": panel_id,
                    "type": "row",
                    "title": item.title,
                    "collapsed": False,
                    "gridPos": {"h": 1, "w": GRID_COLUMNS, "x": 0, "y": y},
                    "panels": [],
                }
            )
            y, line_height = y + 1, 0
            continue
        if x + item.width > GRID_COLUMNS:
            y, x, line_height = y + line_height, 0, 0
        panels.append(_panel_json(item, panel_id, x, y))
        x += item.width
        line_height = max(line_height, item.height)
    datasource = {
        "name": "datasource",
        "label": "Data source",
        "type": "datasource",
        "query": "prometheus",
        "current": {"selected": False, "text": "Prometheus", "value": "prometheus"},
        "hide": 0,
        "includeAll": False,
        "multi": False,
        "refresh": 1,
        "regex": "",
    }
    return {
        "uid": dashboard.uid,
        "title": dashboard.title,
        "description": dashboard.description,
        "tags": list(dashboard.tags),
        "editable": True,
        "graphTooltip": 1,
        "schemaVersion": SCHEMA_VERSION,
        "time": {"from": "now-1h", "to": "now"},
        "refresh": "30s",
        "timezone": "browser",
        "version": 1,
        "templating": {"list": [datasource, *(_variable_json(v) for v in dashboard.variables)]},
        "annotations": {"list": []},
        "links": [
            {
                "type": "dashboards",
                "tags": ["cairn"],
                "asDropdown": True,
                "title": "Cairn dashboards",
                "includeVars": True,
                "keepTime": True,
            }
        ],
        "panels": panels,
    }


_VARIABLE = re.compile(r"\$(\w+)|\$\{(\w+)\}")


def substitute(expr: str, rate_interval: str = "1m", values: dict[str, str] | None = None) -> str:
    """The PromQL Grafana would send: `$__rate_interval` replaced, and each other
    variable by its value (default `.*`, what "All" sends for a regex matcher)."""
    chosen = values or {}

    def value(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        if name == "__rate_interval":
            return rate_interval
        return chosen.get(name, ".*")

    return _VARIABLE.sub(value, expr)
