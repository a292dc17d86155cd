"""Cairn storage pod."""
