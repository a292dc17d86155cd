"""Cairn's REST gateway: a stateless HTTP front door over the client library."""
