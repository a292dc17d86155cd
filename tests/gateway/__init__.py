"""Tests of the REST gateway: its pure parts, and end to end over real HTTP."""
