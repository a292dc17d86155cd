"""Cairn's Grafana dashboards, as code.

Every metric and label here is one Cairn emits (the metrics modules of each
component) or one the scrape adds (`targets.py`: job, pod, container, instance);
the end-to-end test (tests/e2e/test_monitoring.py) evaluates every expression
against a real Prometheus scraping a real cluster and fails on any other name.

Replicas report per shard, so a shard's figure appears once per replica: panels
take `max by (shard)` of offsets and gauges a leader and its followers share, and
`sum` of counters only the leader moves (writes, reads are counted where served).
"""

from __future__ import annotations

from cairn.common.monitoring.grafana import Dashboard, Query, Row, Variable, panel
from cairn.common.monitoring.targets import JOB_CONTROLLER, JOB_GATEWAY, JOB_STORAGE

RATE = "$__rate_interval"
# Selectors of the variables (the value `.*` of "All" matches every series).
NS = 'namespace=~"$namespace"'
SHARD = f'{NS}, pod=~"$pod", shard=~"$shard"'
POD = 'pod=~"$pod"'


def rate(metric: str, selector: str = "") -> str:
    return f"rate({metric}{{{selector}}}[{RATE}])"


def quantile(q: float, histogram: str, selector: str = "", by: str = "") -> str:
    """The q-quantile of a histogram's buckets over the rate window."""
    grouping = f"{by}, le" if by else "le"
    return f"histogram_quantile({q}, sum by ({grouping}) ({rate(histogram + '_bucket', selector)}))"


def percentiles(histogram: str, selector: str = "", by: str = "") -> tuple[Query, ...]:
    prefix = "".join(f"{{{{{label.strip()}}}}} " for label in by.split(",") if label.strip())
    return (
        Query(quantile(0.5, histogram, selector, by), f"{prefix}p50"),
        Query(quantile(0.99, histogram, selector, by), f"{prefix}p99"),
    )


NAMESPACE_VAR = Variable("namespace", "Namespace", "label_values(cairn_shard_role, namespace)")
POD_VAR = Variable("pod", "Storage pod", f"label_values(cairn_shard_role{{{NS}}}, pod)")
SHARD_VAR = Variable(
    "shard", "Shard", f'label_values(cairn_shard_role{{{NS}, pod=~"$pod"}}, shard)'
)
JOB_VAR = Variable("job", "Component", "label_values(process_cpu_time_seconds_total, job)")
PROCESS_POD_VAR = Variable(
    "pod", "Pod", 'label_values(process_cpu_time_seconds_total{job=~"$job"}, pod)'
)


def overview() -> Dashboard:
    return Dashboard(
        uid="cairn-overview",
        title="Cairn / Cluster overview",
        description="Health, leaderless and under-replicated shards, throughput, "
        "latency and data size of the whole cluster.",
        variables=[NAMESPACE_VAR],
        items=[
            Row("Health"),
            panel(
                "Controller reconciling",
                "sum(cairn_controller_leader)",
                kind="stat",
                width=4,
                height=5,
                description="controllers holding the lock (1 is right)",
            ),
            panel(
                "Storage pods healthy",
                Query('sum(cairn_controller_node_health{health="healthy"})', "healthy"),
                Query("count(cairn_controller_node_health)", "known"),
                kind="stat",
                width=4,
                height=5,
            ),
            panel(
                "Shards without a leader",
                f"sum(cairn_controller_shards_without_leader{{{NS}}})",
                kind="stat",
                width=4,
                height=5,
            ),
            panel(
                "Under-replicated shards",
                f"sum(cairn_controller_shards_under_replicated{{{NS}}})",
                kind="stat",
                width=4,
                height=5,
            ),
            panel(
                "Processes up",
                Query('sum by (job) (up{job=~"cairn-.*"})', "{{job}}"),
                kind="stat",
                width=8,
                height=5,
            ),
            Row("Throughput and latency"),
            panel(
                "Writes (operations/s)",
                Query(
                    f"sum by (namespace) ({rate('cairn_shard_write_operations_total', NS)})",
                    "{{namespace}}",
                ),
                unit="ops",
            ),
            panel(
                "Reads (gets/s)",
                Query(
                    f"sum by (namespace) ({rate('cairn_shard_read_operations_total', NS)})",
                    "{{namespace}}",
                ),
                unit="ops",
            ),
            panel(
                "Requests refused (by reason)",
                Query(
                    f"sum by (reason) ({rate('cairn_requests_rejected_total')})",
                    "{{reason}}",
                ),
                unit="reqps",
            ),
            panel(
                "Write latency",
                *percentiles("cairn_shard_write_duration_seconds", NS),
                unit="s",
                width=12,
            ),
            panel(
                "Read latency",
                *percentiles("cairn_shard_read_duration_seconds", NS),
                unit="s",
                width=12,
            ),
            Row("Data"),
            panel(
                "Live data (RocksDB, all replicas)",
                Query(
                    f'sum by (namespace) (cairn_rocksdb_size_bytes{{kind="live_data", {NS}}})',
                    "{{namespace}}",
                ),
                unit="bytes",
            ),
            panel(
                "WAL size (all replicas)",
                Query(f"sum by (namespace) (cairn_wal_size_bytes{{{NS}}})", "{{namespace}}"),
                unit="bytes",
            ),
            panel(
                "Disk free (storage pods)",
                Query(
                    "min by (pod) (cairn_disk_available_bytes / cairn_disk_capacity_bytes)",
                    "{{pod}}",
                ),
                unit="percentunit",
            ),
        ],
    )


def storage() -> Dashboard:
    return Dashboard(
        uid="cairn-storage",
        title="Cairn / Storage pods and shards",
        description="Per pod and per shard: roles, offsets, replication lag, "
        "throughput, WAL and fsync, RocksDB, snapshots, sessions, health probes.",
        variables=[NAMESPACE_VAR, POD_VAR, SHARD_VAR],
        items=[
            Row("Shards"),
            panel(
                "Role of each replica",
                Query(
                    f"max by (pod, shard, role) (cairn_shard_role{{{SHARD}}})",
                    "{{pod}} shard {{shard}} {{role}}",
                ),
                description="1 for the role a replica holds",
            ),
            panel(
                "Term",
                Query(f"max by (shard) (cairn_shard_term{{{SHARD}}})", "shard {{shard}}"),
            ),
            panel(
                "Commit offset",
                Query(f"max by (shard) (cairn_shard_commit_offset{{{SHARD}}})", "shard {{shard}}"),
            ),
            panel(
                "Committed, not yet applied (entries)",
                Query(
                    f"max by (pod, shard) (cairn_shard_commit_offset{{{SHARD}}} "
                    f"- cairn_shard_applied_offset{{{SHARD}}})",
                    "{{pod}} shard {{shard}}",
                ),
            ),
            panel(
                "Follower lag (entries)",
                Query(
                    f"max by (shard, follower) (cairn_shard_follower_lag{{{SHARD}}})",
                    "shard {{shard}} -> {{follower}}",
                ),
            ),
            panel(
                "Follower lag (age of oldest unacknowledged entry)",
                Query(
                    f"max by (shard, follower) (cairn_shard_follower_lag_time_seconds{{{SHARD}}})",
                    "shard {{shard}} -> {{follower}}",
                ),
                unit="s",
            ),
            Row("Requests"),
            panel(
                "Writes (operations/s, by shard)",
                Query(
                    f"sum by (shard) ({rate('cairn_shard_write_operations_total', SHARD)})",
                    "shard {{shard}}",
                ),
                unit="ops",
            ),
            panel(
                "Reads (gets/s, by shard)",
                Query(
                    f"sum by (shard) ({rate('cairn_shard_read_operations_total', SHARD)})",
                    "shard {{shard}}",
                ),
                unit="ops",
            ),
            panel(
                "Operations per log entry (folding)",
                Query(
                    f"sum by (shard) ({rate('cairn_fold_operations_total', SHARD)}) "
                    f"/ sum by (shard) ({rate('cairn_fold_entries_total', SHARD)})",
                    "shard {{shard}}",
                ),
            ),
            panel(
                "Write latency p99 (by shard)",
                Query(
                    quantile(0.99, "cairn_shard_write_duration_seconds", SHARD, "shard"),
                    "shard {{shard}}",
                ),
                unit="s",
            ),
            panel(
                "Read latency p99 (by shard)",
                Query(
                    quantile(0.99, "cairn_shard_read_duration_seconds", SHARD, "shard"),
                    "shard {{shard}}",
                ),
                unit="s",
            ),
            panel(
                "Client RPC latency p99 (by method)",
                Query(
                    quantile(
                        0.99,
                        "rpc_server_call_duration_seconds",
                        f'job="{JOB_STORAGE}", {POD}',
                        "rpc_method",
                    ),
                    "{{rpc_method}}",
                ),
                Query(
                    quantile(
                        0.99,
                        "cairn_rpc_server_stream_request_duration_seconds",
                        POD,
                        "rpc_method",
                    ),
                    "{{rpc_method}} (per request)",
                ),
                unit="s",
            ),
            panel(
                "Open streams (notifications, sequence updates)",
                Query(
                    f"sum by (pod) (cairn_notification_subscribers{{{SHARD}}})",
                    "{{pod}} notifications",
                ),
                Query(
                    f"sum by (pod) (cairn_sequence_updates_subscribers{{{SHARD}}})",
                    "{{pod}} sequence updates",
                ),
            ),
            panel(
                "Sessions active",
                Query(f"max by (shard) (cairn_session_active{{{SHARD}}})", "shard {{shard}}"),
            ),
            panel(
                "Sessions created / expired",
                Query(f"sum({rate('cairn_session_created_total', SHARD)})", "created"),
                Query(f"sum({rate('cairn_session_expired_total', SHARD)})", "expired"),
                unit="ops",
            ),
            Row("WAL"),
            panel(
                "WAL fsync latency (by pod)",
                *percentiles("cairn_wal_sync_duration_seconds", SHARD, "pod"),
                unit="s",
            ),
            panel(
                "WAL append latency (by pod)",
                *percentiles("cairn_wal_append_duration_seconds", SHARD, "pod"),
                unit="s",
            ),
            panel(
                "WAL size",
                Query(f"sum by (pod) (cairn_wal_size_bytes{{{SHARD}}})", "{{pod}} bytes"),
                unit="bytes",
            ),
            panel(
                "WAL segments",
                Query(f"sum by (pod) (cairn_wal_segments{{{SHARD}}})", "{{pod}}"),
            ),
            panel(
                "WAL trims",
                Query(f"sum by (pod) ({rate('cairn_wal_trims_total', SHARD)})", "{{pod}}"),
                unit="ops",
            ),
            Row("RocksDB and read cache"),
            panel(
                "RocksDB memory and disk (by kind)",
                Query(
                    f"sum by (pod, kind) (cairn_rocksdb_size_bytes{{{SHARD}}})",
                    "{{pod}} {{kind}}",
                ),
                unit="bytes",
            ),
            panel(
                "RocksDB write stalls",
                Query(f"max by (pod) (cairn_rocksdb_write_stopped{{{SHARD}}})", "{{pod}} stopped"),
                Query(
                    f"max by (pod) (cairn_rocksdb_delayed_write_rate_bytes_per_second{{{SHARD}}})",
                    "{{pod}} delayed to (B/s)",
                ),
            ),
            panel(
                "Read cache hit ratio",
                Query(
                    f"sum by (pod) ({rate('cairn_read_cache_hits_total', SHARD)}) / "
                    f"(sum by (pod) ({rate('cairn_read_cache_hits_total', SHARD)}) + "
                    f"sum by (pod) ({rate('cairn_read_cache_misses_total', SHARD)}))",
                    "{{pod}}",
                ),
                unit="percentunit",
            ),
            Row("Snapshots"),
            panel(
                "Snapshots sent (leader side)",
                Query(f"sum({rate('cairn_snapshot_sent_total', SHARD)})", "started"),
                Query(f"sum({rate('cairn_snapshot_sent_completed_total', SHARD)})", "completed"),
                Query(f"sum({rate('cairn_snapshot_sent_failed_total', SHARD)})", "failed"),
                unit="ops",
            ),
            panel(
                "Snapshots received (follower side)",
                Query(f"sum({rate('cairn_snapshot_received_total', SHARD)})", "received"),
                Query(f"sum({rate('cairn_snapshot_installed_total', SHARD)})", "installed"),
                unit="ops",
            ),
            panel(
                "Snapshot bytes",
                Query(f"sum({rate('cairn_snapshot_sent_bytes_total', SHARD)})", "sent"),
                Query(f"sum({rate('cairn_snapshot_received_bytes_total', SHARD)})", "received"),
                unit="Bps",
            ),
            panel(
                "Snapshot duration p99",
                Query(quantile(0.99, "cairn_snapshot_send_duration_seconds", SHARD), "sending"),
                Query(quantile(0.99, "cairn_snapshot_duration_seconds", SHARD), "receiving"),
                unit="s",
            ),
            Row("Health sidecars"),
            panel(
                "Probes of the storage pod",
                Query(
                    f"sum by (pod, result) ({rate('cairn_health_probes_total', POD)})",
                    "{{pod}} {{result}}",
                ),
                unit="ops",
            ),
            panel(
                "Probe latency p99",
                Query(quantile(0.99, "cairn_health_probe_duration_seconds", POD, "pod"), "{{pod}}"),
                unit="s",
            ),
            panel(
                "Live / ready / storage reachable",
                Query(f"min by (pod) (cairn_health_live{{{POD}}})", "{{pod}} live"),
                Query(f"min by (pod) (cairn_health_ready{{{POD}}})", "{{pod}} ready"),
                Query(
                    f"min by (pod) (cairn_health_storage_reachable{{{POD}}})",
                    "{{pod}} reachable",
                ),
            ),
        ],
    )


def replication() -> Dashboard:
    return Dashboard(
        uid="cairn-replication",
        title="Cairn / Replication and elections",
        description="The controller's view: elections, terms, leaderless and "
        "under-replicated shards, node health, ensemble changes, cluster-state writes.",
        variables=[NAMESPACE_VAR],
        items=[
            Row("Elections"),
            panel(
                "Elections (by reason, per 5 minutes)",
                Query(
                    "sum by (reason) (increase(cairn_controller_elections_total[5m]))",
                    "{{reason}}",
                ),
            ),
            panel(
                "Election duration (by reason)",
                *percentiles("cairn_controller_election_duration_seconds", "", "reason"),
                unit="s",
            ),
            panel(
                "Term of each shard",
                Query(
                    f"max by (namespace, shard) (cairn_controller_shard_term{{{NS}}})",
                    "{{namespace}}/{{shard}}",
                ),
            ),
            Row("Shards and nodes"),
            panel(
                "Shards without a leader / under-replicated",
                Query(
                    f"max by (namespace) (cairn_controller_shards_without_leader{{{NS}}})",
                    "{{namespace}} without leader",
                ),
                Query(
                    f"max by (namespace) (cairn_controller_shards_under_replicated{{{NS}}})",
                    "{{namespace}} under-replicated",
                ),
            ),
            panel(
                "Storage pod health",
                Query(
                    "max by (node, health) (cairn_controller_node_health)",
                    "{{node}} {{health}}",
                ),
            ),
            panel(
                "Follower lag, worst per shard",
                Query(
                    f"max by (namespace, shard) (cairn_shard_follower_lag_time_seconds{{{NS}}})",
                    "{{namespace}}/{{shard}}",
                ),
                unit="s",
            ),
            panel(
                "Ensemble changes and actions in flight",
                Query(
                    f"sum(cairn_controller_ensemble_changes_in_flight{{{NS}}})",
                    "ensemble changes",
                ),
                Query("sum(cairn_controller_actions_in_flight)", "actions"),
            ),
            Row("Controller"),
            panel(
                "Controller leadership",
                Query(
                    f'max by (pod) (cairn_controller_leader{{job="{JOB_CONTROLLER}"}})', "{{pod}}"
                ),
            ),
            panel(
                "Cluster-state write latency",
                *percentiles("cairn_controller_state_write_duration_seconds"),
                unit="s",
            ),
            panel(
                "Cluster-state write conflicts",
                Query(f"sum({rate('cairn_controller_state_conflicts_total')})", "conflicts"),
                unit="ops",
            ),
        ],
    )


def gateway() -> Dashboard:
    counts = "http_server_request_duration_seconds_count"
    selector = f'job="{JOB_GATEWAY}"'
    errors = f'{selector}, http_response_status_code=~"5.."'
    return Dashboard(
        uid="cairn-gateway",
        title="Cairn / REST gateway",
        description="HTTP requests by route template and status, their latency, "
        "errors and the change feeds open.",
        variables=[],
        items=[
            panel(
                "Requests (by route and status)",
                Query(
                    "sum by (http_request_method, http_route, http_response_status_code) "
                    f"({rate(counts, selector)})",
                    "{{http_request_method}} {{http_route}} {{http_response_status_code}}",
                ),
                unit="reqps",
                width=12,
            ),
            panel(
                "Server errors (5xx share)",
                # No 5xx series at all means no errors: 0, not "no data".
                Query(
                    f"(sum({rate(counts, errors)}) or vector(0)) / sum({rate(counts, selector)})",
                    "5xx",
                ),
                unit="percentunit",
                width=12,
            ),
            panel(
                "Latency p99 (by route)",
                Query(
                    quantile(
                        0.99,
                        "http_server_request_duration_seconds",
                        selector,
                        "http_request_method, http_route",
                    ),
                    "{{http_request_method}} {{http_route}}",
                ),
                unit="s",
                width=12,
            ),
            panel(
                "Latency p50 (by route)",
                Query(
                    quantile(
                        0.5,
                        "http_server_request_duration_seconds",
                        selector,
                        "http_request_method, http_route",
                    ),
                    "{{http_request_method}} {{http_route}}",
                ),
                unit="s",
                width=12,
            ),
            panel(
                "Change feeds open (SSE)",
                Query("sum by (pod) (cairn_gateway_sse_streams)", "{{pod}}"),
                width=12,
            ),
        ],
    )


def processes() -> Dashboard:
    selector = 'job=~"$job", pod=~"$pod"'
    by = "job, pod, container"
    legend = "{{pod}} {{container}}"
    return Dashboard(
        uid="cairn-processes",
        title="Cairn / Processes",
        description="Every Cairn process: up, CPU, memory, files, threads, "
        "garbage collection, event-loop lag and certificate expiry.",
        variables=[JOB_VAR, PROCESS_POD_VAR],
        items=[
            panel(
                "Up",
                Query(f"max by ({by}) (up{{{selector}}})", legend),
                width=24,
                height=6,
            ),
            panel(
                "CPU (cores)",
                Query(
                    f"sum by ({by}) ({rate('process_cpu_time_seconds_total', selector)})", legend
                ),
                unit="percentunit",
            ),
            panel(
                "Resident memory",
                Query(f"max by ({by}) (process_memory_usage_bytes{{{selector}}})", legend),
                unit="bytes",
            ),
            panel(
                "Open files",
                Query(f"max by ({by}) (cairn_process_open_files{{{selector}}})", legend),
            ),
            panel(
                "Threads",
                Query(f"max by ({by}) (cairn_process_threads{{{selector}}})", legend),
            ),
            panel(
                "Garbage collections (by generation)",
                Query(
                    f"sum by (job, generation) ({rate('cpython_gc_collections_total', selector)})",
                    "{{job}} gen {{generation}}",
                ),
                unit="ops",
            ),
            panel(
                "GC pause p99",
                Query(
                    quantile(0.99, "cairn_process_gc_pause_duration_seconds", selector, by),
                    legend,
                ),
                unit="s",
            ),
            panel(
                "Event-loop lag p99",
                Query(quantile(0.99, "cairn_process_event_loop_lag_seconds", selector, by), legend),
                unit="s",
                width=24,
            ),
            panel(
                "Certificate expiry (days)",
                Query(
                    f"min by ({by}, certificate) "
                    f"(cairn_tls_certificate_expiry_seconds{{{selector}}} - time()) / 86400",
                    f"{legend} {{{{certificate}}}}",
                ),
                description="Days until each certificate file of a process's TLS "
                "directory expires (cert-manager renews at 2/3 of the lifetime; "
                "CairnCertificateExpiringSoon fires below 7 days). No data: no TLS.",
                width=24,
            ),
        ],
    )


def all_dashboards() -> list[Dashboard]:
    return [overview(), storage(), replication(), gateway(), processes()]
