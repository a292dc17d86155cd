"""Cairn's controller: cluster state, failure detection, elections, ensemble changes,
the admin API and the local launcher."""

from cairn.common.grpc_runtime import use_poller_io
from cairn.common.version import distribution_version

# Before any module of this package imports grpc: see cairn.common.grpc_runtime.
use_poller_io()

DISTRIBUTION = "cairn-kv-controller"
__version__ = distribution_version(DISTRIBUTION)
