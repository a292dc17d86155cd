"""Tests of the health sidecar and of the storage pod's gRPC health service."""
