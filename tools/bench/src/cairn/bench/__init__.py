"""Cairn's benchmarks, kept out of the distributions that run in production.

    storage/     `cairn-bench`: load against storage pods (or a null server), and
                 the in-process apply-cost measurement
    failover.py  `cairn-failover`: failover and rebalancing time on a local cluster
    perf/        the load generator behind `cairn perf` (the client's command line
                 runs it when this distribution is installed)

Past measurements and how they were taken are in docs/performance.md.
"""

from cairn.common.grpc_runtime import use_poller_io
from cairn.common.version import distribution_version

# Before any module of this package imports grpc (see cairn.common.grpc_runtime):
# a load generator's own thread crossings would otherwise add to every call it
# times, and to the CPU a request costs it.
use_poller_io()

DISTRIBUTION = "cairn-kv-bench"
__version__ = distribution_version(DISTRIBUTION)
