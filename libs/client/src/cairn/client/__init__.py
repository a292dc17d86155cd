"""Cairn's client library."""
