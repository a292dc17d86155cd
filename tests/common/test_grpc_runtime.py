"""Cairn's processes do gRPC socket I/O on the poller thread, not EventEngine threads."""

from __future__ import annotations

import os
import subprocess
import sys

from cairn.common.grpc_runtime import GRPC_EXPERIMENTS_ENV, POLLER_IO_EXPERIMENTS, use_poller_io

# A child that imports a service package the way its console script does, then
# makes round trips on loopback, and prints the CPU ticks its EventEngine threads
# used and the whole process used.
_ROUND_TRIPS = """
import asyncio, glob, os, sys
import {package}
import grpc, grpc.aio

def ticks(only_event_engine):
    total = 0
    for task in glob.glob(f"/proc/{{os.getpid()}}/task/*"):
        with open(task + "/comm") as comm:
            if only_event_engine and comm.read().strip() != "event_engine":
                continue
        with open(task + "/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total

async def main():
    async def echo(request, context):
        return request
    server = grpc.aio.server()
    server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(
        "t.Echo", {{"Call": grpc.unary_unary_rpc_method_handler(echo)}})])
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    async with grpc.aio.insecure_channel(f"127.0.0.1:{{port}}") as channel:
        call = channel.unary_unary("/t.Echo/Call")
        for _ in range(4000):
            assert await call(b"x" * 100) == b"x" * 100
        # Before anything closes: a thread that exits takes its ticks with it.
        print(os.environ.get("GRPC_EXPERIMENTS"), ticks(True), ticks(False), sep="|")
    await server.stop(None)

asyncio.run(main())
"""


def _run_round_trips(package: str, experiments: str | None) -> tuple[str, int, int]:
    env = {k: v for k, v in os.environ.items() if k != GRPC_EXPERIMENTS_ENV}
    if experiments is not None:
        env[GRPC_EXPERIMENTS_ENV] = experiments
    done = subprocess.run(
        [sys.executable, "-c", _ROUND_TRIPS.format(package=package)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    chosen, event_engine_ticks, all_ticks = done.stdout.strip().split("|")
    return chosen, int(event_engine_ticks), int(all_ticks)


def test_sets_poller_io_when_the_environment_is_silent() -> None:
    environ: dict[str, str] = {}
    use_poller_io(environ)
    assert environ == {GRPC_EXPERIMENTS_ENV: POLLER_IO_EXPERIMENTS}


def test_an_operators_choice_wins() -> None:
    environ = {GRPC_EXPERIMENTS_ENV: "event_engine_client"}
    assert use_poller_io(environ) is False
    assert environ == {GRPC_EXPERIMENTS_ENV: "event_engine_client"}


def test_service_processes_do_socket_io_off_the_event_engine_threads() -> None:
    # Without the setting, 4000 round trips keep EventEngine threads busy for a
    # sizeable share of the process's CPU (about a fifth, measured); with it,
    # those threads only keep timers. The benchmarks' load generators too
    # (cairn.bench, and the `cairn` command, whose `perf` is one): their own
    # crossings would count in what they measure.
    packages = (
        "cairn.storage",
        "cairn.controller",
        "cairn.gateway",
        "cairn.health",
        "cairn.bench",
        "cairn.client.command",
    )
    for package in packages:
        chosen, event_engine_ticks, all_ticks = _run_round_trips(package, None)
        assert chosen == POLLER_IO_EXPERIMENTS, package
        assert all_ticks > 0
        assert event_engine_ticks <= max(2, all_ticks // 50), (package, event_engine_ticks)


def test_without_the_setting_event_engine_threads_do_the_io() -> None:
    # The control for the test above: the same round trips with EventEngine I/O
    # chosen explicitly (an operator's value wins) do load those threads.
    chosen, event_engine_ticks, all_ticks = _run_round_trips("cairn.storage", "")
    assert chosen == ""
    assert event_engine_ticks > all_ticks // 50, (event_engine_ticks, all_ticks)
