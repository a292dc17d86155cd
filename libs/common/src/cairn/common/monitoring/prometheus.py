"""A real Prometheus server (Debian's `prometheus`) for local runs: started on a
free port with a generated prometheus.yml, and a small client of its HTTP API.
Used by the end-to-end test of the dashboards and alerts and by the README plots.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import yaml

from cairn.common.ports import unused_port

T = TypeVar("T")
START_TIMEOUT_S = 30.0
POLL_INTERVAL_S = 0.2


class PrometheusError(Exception):
    """The API answered an error (`error_type` is Prometheus' own, e.g. bad_data)."""

    def __init__(self, error_type: str, message: str) -> None:
        super().__init__(f"{error_type}: {message}")
        self.error_type = error_type


def wait_for(
    condition: Callable[[], T | None], timeout_s: float, what: str, interval_s: float = 0.25
) -> T:
    """Poll `condition` until it returns something true; fail after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {timeout_s} s")
        time.sleep(interval_s)


class PrometheusServer:
    def __init__(self, directory: Path, config: dict[str, Any], rules: dict[str, Any]) -> None:
        self.directory = directory
        self.config = dict(config)
        self.rules = rules
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> str:
        executable = shutil.which("prometheus")
        if executable is None:
            raise FileNotFoundError("prometheus (Debian package prometheus) is not installed")
        self.directory.mkdir(parents=True, exist_ok=True)
        rules_file = self.directory / "rules.yaml"
        rules_file.write_text(yaml.safe_dump(self.rules, sort_keys=False))
        config_file = self.directory / "prometheus.yml"
        config_file.write_text(
            yaml.safe_dump({**self.config, "rule_files": [str(rules_file)]}, sort_keys=False)
        )
        self.port = unused_port()
        log = (self.directory / "prometheus.log").open("wb")
        self.process = subprocess.Popen(
            [
                executable,
                f"--config.file={config_file}",
                f"--storage.tsdb.path={self.directory / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--log.level=warn",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        wait_for(self._ready, START_TIMEOUT_S, "prometheus ready")
        return self.url

    def _ready(self) -> bool:
        if self.process is not None and self.process.poll() is not None:
            raise RuntimeError(f"prometheus exited: {self.log_text()[-2000:]}")
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as answer:
                return bool(answer.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def log_text(self) -> str:
        path = self.directory / "prometheus.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    # -- the HTTP API --------------------------------------------------------------------

    def api(self, path: str, **params: Any) -> Any:
        """GET /api/v1/<path>; the `data` of the answer. Params with list values repeat."""
        query = urllib.parse.urlencode(params, doseq=True)
        try:
            with urllib.request.urlopen(f"{self.url}/api/v1/{path}?{query}", timeout=30) as got:
                document = json.loads(got.read())
        except urllib.error.HTTPError as error:
            document = json.loads(error.read() or b"{}")
            raise PrometheusError(
                document.get("errorType", str(error.code)), document.get("error", "")
            ) from None
        if document.get("status") != "success":
            raise PrometheusError(document.get("errorType", "?"), document.get("error", ""))
        return document["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self.api("query", query=expr)["result"]
        return result

    def query_range(
        self, expr: str, start: float, end: float, step_s: float = 1.0
    ) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self.api(
            "query_range", query=expr, start=start, end=end, step=step_s
        )["result"]
        return result

    def value(self, expr: str) -> float | None:
        """The value of a query with one result, else None."""
        result = self.query(expr)
        return float(result[0]["value"][1]) if len(result) == 1 else None

    def metric_names(self) -> set[str]:
        return set(self.api("label/__name__/values"))

    def label_names(self, metric: str) -> set[str]:
        """Every label name on some series of `metric` (any time)."""
        found: set[str] = set()
        for series in self.api("series", **{"match[]": metric}):
            found.update(series)
        found.discard("__name__")
        return found

    def targets_up(self) -> bool:
        active = self.api("targets")["activeTargets"]
        return bool(active) and all(t["health"] == "up" for t in active)
