"""The health sidecar of a Cairn storage pod (`cairn-health`).

It probes its pod's internal gRPC port, answers the kubelet's /livez and
/readyz (and /status for people), and heartbeats the pod's state to the
controller, also while the pod is hung, so that the controller hears of it.

    settings.py  command-line settings
    core.py      the decisions, free of I/O: heartbeat, liveness, readiness, lag
    prober.py    Coordination.GetStatus every probe interval, bounded by a timeout
    pusher.py    POST {controller}/v1/heartbeats every heartbeat interval
    api.py       the FastAPI app: /livez /readyz /status
    service.py   all of them in one event loop, uvicorn included
    __main__.py  the program: parse, run, stop on SIGTERM/SIGINT
"""

from cairn.common.grpc_runtime import use_poller_io
from cairn.common.version import distribution_version

# Before any module of this package imports grpc: see cairn.common.grpc_runtime.
use_poller_io()

DISTRIBUTION = "cairn-kv-health"
__version__ = distribution_version(DISTRIBUTION)
