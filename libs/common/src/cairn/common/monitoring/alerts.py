"""Cairn's alerts, as Prometheus alerting rules.

The thresholds and `for` durations are parameters (`AlertSettings`) so that the
end-to-end test can load the same expressions with a shorter wait; the committed
rules use the defaults. Each alert has a unit test in
`kustomize/components/monitoring/rules/cairn-alerts.test.yaml` (`promtool test rules`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cairn.common.monitoring.targets import JOB_CONTROLLER, JOB_STORAGE

GROUP_NAME = "cairn"


@dataclass(frozen=True)
class AlertSettings:
    """Thresholds (with units) and how long a condition must hold before it fires."""

    leaderless_for: str = "1m"
    under_replicated_for: str = "5m"
    follower_lag_s: float = 30.0
    follower_lag_for: str = "2m"
    election_storm_window: str = "10m"
    election_storm_count: int = 5
    fsync_p99_s: float = 0.1
    fsync_window: str = "5m"
    fsync_for: str = "10m"
    disk_free_ratio: float = 0.1
    disk_for: str = "5m"
    down_for: str = "2m"
    unhealthy_for: str = "2m"
    # cert-manager renews at 2/3 of a certificate's lifetime (30 days of 90): a week
    # left means renewals have failed for weeks, with time left to fix them.
    certificate_expiry_days: float = 7.0
    certificate_expiry_for: str = "15m"


DEFAULT_SETTINGS = AlertSettings()


@dataclass(frozen=True)
class Alert:
    name: str
    expr: str
    for_: str
    severity: str
    summary: str
    description: str

    def rule(self) -> dict[str, Any]:
        return {
            "alert": self.name,
            "expr": self.expr,
            "for": self.for_,
            "labels": {"severity": self.severity},
            "annotations": {
                "summary": self.summary,
                "description": self.description,
            },
        }


def alerts(settings: AlertSettings = DEFAULT_SETTINGS) -> list[Alert]:
    s = settings
    return [
        Alert(
            "CairnShardWithoutLeader",
            "max by (namespace) (cairn_controller_shards_without_leader) > 0",
            s.leaderless_for,
            "critical",
            "Shards of namespace {{ $labels.namespace }} have no leader",
            "{{ $value }} shard(s) of {{ $labels.namespace }} have had no confirmed leader "
            f"for {s.leaderless_for}: their writes and reads fail. The controller's elections "
            "(Replication dashboard) say why.",
        ),
        Alert(
            "CairnShardUnderReplicated",
            "max by (namespace) (cairn_controller_shards_under_replicated) > 0",
            s.under_replicated_for,
            "warning",
            "Shards of namespace {{ $labels.namespace }} are below their replication factor",
            "{{ $value }} shard(s) of {{ $labels.namespace }} have fewer healthy members than "
            "the replication factor: one more loss may stop them.",
        ),
        Alert(
            "CairnFollowerLagging",
            "max by (namespace, shard, follower) (cairn_shard_follower_lag_time_seconds) "
            f"> {s.follower_lag_s:g}",
            s.follower_lag_for,
            "warning",
            "A follower of shard {{ $labels.namespace }}/{{ $labels.shard }} lags",
            "Follower {{ $labels.follower }} has not made durable an entry "
            "{{ $value | humanizeDuration }} old (threshold "
            f"{s.follower_lag_s:g} s).",
        ),
        Alert(
            "CairnElectionStorm",
            f"sum(increase(cairn_controller_elections_total[{s.election_storm_window}])) "
            f"> {s.election_storm_count}",
            "0s",
            "warning",
            "Many elections",
            "{{ $value | humanize }} elections in the last "
            f"{s.election_storm_window}: leaders keep changing (flapping pods, a slow "
            "disk, a network problem?).",
        ),
        Alert(
            "CairnFsyncSlow",
            "histogram_quantile(0.99, sum by (pod, le) "
            f"(rate(cairn_wal_sync_duration_seconds_bucket[{s.fsync_window}]))) "
            f"> {s.fsync_p99_s:g}",
            s.fsync_for,
            "warning",
            "WAL fsync is slow on {{ $labels.pod }}",
            "The 99th percentile of WAL syncs on {{ $labels.pod }} is "
            "{{ $value | humanizeDuration }}: every write there waits that long.",
        ),
        Alert(
            "CairnDiskNearlyFull",
            "min by (pod) (cairn_disk_available_bytes / cairn_disk_capacity_bytes) "
            f"< {s.disk_free_ratio:g}",
            s.disk_for,
            "critical",
            "The data disk of {{ $labels.pod }} is nearly full",
            "{{ $value | humanizePercentage }} of the data file system of "
            "{{ $labels.pod }} is free. A full WAL refuses writes.",
        ),
        Alert(
            "CairnControllerDown",
            f'absent(up{{job="{JOB_CONTROLLER}"}} == 1)',
            s.down_for,
            "critical",
            "No Cairn controller is up",
            "No controller has answered a scrape for "
            f"{s.down_for}: nothing detects failures or elects leaders.",
        ),
        Alert(
            "CairnControllerNotReconciling",
            f'max(cairn_controller_leader{{job="{JOB_CONTROLLER}"}}) < 1',
            s.down_for,
            "critical",
            "No Cairn controller holds the lock",
            "Controllers are up but none reconciles: failures go unhandled.",
        ),
        Alert(
            "CairnStoragePodDown",
            f'up{{job="{JOB_STORAGE}"}} == 0',
            s.down_for,
            "critical",
            "Storage pod {{ $labels.pod }} is down",
            "Prometheus has not scraped {{ $labels.pod }} for " + s.down_for + ".",
        ),
        Alert(
            "CairnStoragePodUnhealthy",
            'max by (node) (cairn_controller_node_health{health!="healthy"}) == 1',
            s.unhealthy_for,
            "warning",
            "The controller finds storage pod {{ $labels.node }} unhealthy",
            "The controller has recorded {{ $labels.node }} as not healthy for "
            f"{s.unhealthy_for}; its shards move or wait.",
        ),
        Alert(
            "CairnCertificateExpiringSoon",
            "min by (job, instance, pod, certificate) (cairn_tls_certificate_expiry_seconds)"
            f" - time() < {s.certificate_expiry_days * 86400:g}",
            s.certificate_expiry_for,
            "warning",
            "Certificate {{ $labels.certificate }} of {{ $labels.instance }} expires soon",
            "{{ $labels.certificate }} of {{ $labels.instance }} expires in "
            "{{ $value | humanizeDuration }} (threshold "
            f"{s.certificate_expiry_days:g} days). cert-manager renews at 2/3 of the "
            "lifetime, so renewal is failing (the Certificate's events say why); once "
            "expired, peers refuse this process's handshakes.",
        ),
    ]


def rule_groups(settings: AlertSettings = DEFAULT_SETTINGS) -> dict[str, Any]:
    """A Prometheus rule file (as a dict)."""
    return {"groups": [{"name": GROUP_NAME, "rules": [a.rule() for a in alerts(settings)]}]}
