"""Code shared by every Cairn component: routing, key order, errors."""

from cairn.common.version import distribution_version

DISTRIBUTION = "cairn-kv-common"
__version__ = distribution_version(DISTRIBUTION)
