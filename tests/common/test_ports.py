"""Ports picked for servers stay out of the range outgoing connections use."""

from __future__ import annotations

import socket
from pathlib import Path

from cairn.common.ports import (
    DEFAULT_EPHEMERAL_LOW,
    LOWEST_PICKED,
    can_bind,
    ephemeral_low,
    unused_port,
)


def test_a_picked_port_is_bindable_and_below_the_ephemeral_range() -> None:
    for _ in range(20):
        port = unused_port()
        assert LOWEST_PICKED <= port < ephemeral_low()
        assert can_bind("127.0.0.1", port)


def test_a_port_with_a_listener_cannot_be_bound() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind(("127.0.0.1", unused_port()))
        listener.listen()
        assert not can_bind("127.0.0.1", listener.getsockname()[1])


def test_the_ephemeral_range_is_read_from_the_kernel_setting(tmp_path: Path) -> None:
    setting = tmp_path / "ip_local_port_range"
    setting.write_text("40000\t60999\n")
    assert ephemeral_low(setting) == 40000
    setting.write_text("garbage\n")
    assert ephemeral_low(setting) == DEFAULT_EPHEMERAL_LOW
    assert ephemeral_low(tmp_path / "absent") == DEFAULT_EPHEMERAL_LOW
