"""Cairn's client library."""

from cairn.common.version import distribution_version

DISTRIBUTION = "cairn-kv-client"
__version__ = distribution_version(DISTRIBUTION)
