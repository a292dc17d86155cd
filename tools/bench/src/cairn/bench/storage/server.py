"""Spawn and stop a standalone `cairn-storage` server for `cairn-bench --spawn`,
and the null server (null_server.py) for the gRPC ceiling.

The server runs as `python -c 'from cairn.storage.__main__ import main; ...'`
with this interpreter (so it is the same checkout, no PATH lookup) and its pid
is the server process itself, which `cpu_seconds` reads from /proc. Its stdout
and stderr go to a log file in the work directory, which is polled for the
`cairn-storage listening on HOST:PORT` line: a file, unlike a pipe, never fills
up and blocks the server if nobody reads it. The null server runs as
`python -m cairn.bench.storage.null_server` and is handled the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from cairn.bench.storage.null_server import LISTENING_PREFIX as NULL_LISTENING_PREFIX

LISTENING_LINE = re.compile(r"cairn-storage listening on (\S+)")
NULL_LISTENING_LINE = re.compile(re.escape(NULL_LISTENING_PREFIX) + r"(\S+)")
_SERVER_CODE = "import sys; from cairn.storage.__main__ import main; sys.exit(main())"
_POLL_INTERVAL_S = 0.02
_WILDCARD_HOSTS = {"0.0.0.0", "::", "[::]", ""}


class ServerStartError(RuntimeError):
    """The server exited or did not announce its address in time."""


@dataclass(frozen=True, slots=True)
class SpawnedProcess:
    address: str
    pid: int
    work_dir: Path  # temporary: holds the log (removed when the process is stopped)
    log_path: Path

    def log_tail(self, max_lines: int = 20) -> str:
        return _tail(self.log_path, max_lines)


@dataclass(frozen=True, slots=True)
class SpawnedServer:
    address: str
    pid: int
    data_dir: Path
    work_dir: Path  # holds the log, and the data dir unless one was given
    log_path: Path

    def log_tail(self, max_lines: int = 20) -> str:
        return _tail(self.log_path, max_lines)


def _tail(path: Path, max_lines: int) -> str:
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return ""
    return "\n".join(lines[-max_lines:])


def dialable(address: str) -> str:
    """`host:port` with a wildcard bind host replaced by loopback."""
    host, _, port = address.rpartition(":")
    return f"127.0.0.1:{port}" if host in _WILDCARD_HOSTS else address


def server_command(data_dir: Path, shards: int, extra_args: Sequence[str]) -> list[str]:
    return [
        sys.executable,
        "-c",
        _SERVER_CODE,
        "standalone",
        "--port",
        "0",
        "--shards",
        str(shards),
        "--data-dir",
        str(data_dir),
        # A free port, so that runs side by side do not clash (--server-arg overrides).
        "--metrics-port",
        "0",
        # Plaintext unless the caller gives a certificate directory; without
        # credentials unless it gives an auth file (--server-arg --auth-config FILE
        # measures the data path with them).
        *([] if "--tls-dir" in extra_args else ["--insecure"]),
        *([] if "--auth-config" in extra_args else ["--no-auth"]),
        *extra_args,
    ]


def _read_log(log_path: Path) -> str:
    try:
        return log_path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


async def _launch(command: list[str], log_path: Path) -> asyncio.subprocess.Process:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    with log_path.open("wb") as log_file:  # the child keeps its own descriptor
        return await asyncio.create_subprocess_exec(
            *command,
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            env=env,
        )


@asynccontextmanager
async def spawned_process(
    name: str,
    command: list[str],
    listening: re.Pattern[str],
    start_timeout_s: float,
    stop_timeout_s: float,
    work_dir: Path | None = None,
) -> AsyncIterator[SpawnedProcess]:
    """A process that prints `listening` (group 1: its address) once it serves.

    Stopped on exit: SIGTERM, then SIGKILL after `stop_timeout_s`. Its log goes to
    `server.log` in `work_dir`, a temp dir made (and removed) here unless given.
    """
    own_work_dir = work_dir is None
    work = Path(tempfile.mkdtemp(prefix="cairn-bench-")) if work_dir is None else work_dir
    log_path = work / "server.log"
    try:
        process = await _launch(command, log_path)
        try:
            address = await _wait_listening(name, process, log_path, listening, start_timeout_s)
            yield SpawnedProcess(dialable(address), process.pid, work, log_path)
        finally:
            code = await _stop(name, process, stop_timeout_s)
            if code not in (0, -signal.SIGTERM):
                print(
                    f"cairn-bench: {name} exited with code {code}; log tail:\n"
                    f"{_tail(log_path, 20)}",
                    file=sys.stderr,
                )
    finally:
        if own_work_dir:
            shutil.rmtree(work, ignore_errors=True)


@asynccontextmanager
async def spawned_server(
    shards: int,
    data_dir: Path | None,
    extra_args: Sequence[str],
    start_timeout_s: float,
    stop_timeout_s: float,
) -> AsyncIterator[SpawnedServer]:
    """A running server; stopped (SIGTERM, then SIGKILL) and its temp dir removed on exit.

    A caller-given data dir is kept; the temp work dir (log, own data dir) is removed.
    """
    work_dir = Path(tempfile.mkdtemp(prefix="cairn-bench-"))
    server_data = work_dir / "data" if data_dir is None else data_dir
    try:
        async with spawned_process(
            "server",
            server_command(server_data, shards, extra_args),
            LISTENING_LINE,
            start_timeout_s,
            stop_timeout_s,
            work_dir,
        ) as process:
            yield SpawnedServer(
                address=process.address,
                pid=process.pid,
                data_dir=server_data,
                work_dir=work_dir,
                log_path=process.log_path,
            )
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)


def null_server_command(shards: int, value_size_bytes: int) -> list[str]:
    module = "cairn.bench.storage.null_server"
    return [
        sys.executable,
        "-m",
        module,
        "--port",
        "0",
        "--shards",
        str(shards),
        "--value-size",
        str(value_size_bytes),
    ]


@asynccontextmanager
async def spawned_null_server(
    shards: int, value_size_bytes: int, start_timeout_s: float, stop_timeout_s: float
) -> AsyncIterator[SpawnedProcess]:
    """The null server (see null_server.py) announcing `shards` shards, for a ceiling;
    its gets answer values of `value_size_bytes`."""
    async with spawned_process(
        "null server",
        null_server_command(shards, value_size_bytes),
        NULL_LISTENING_LINE,
        start_timeout_s,
        stop_timeout_s,
    ) as process:
        yield process


async def _wait_listening(
    name: str,
    process: asyncio.subprocess.Process,
    log_path: Path,
    listening: re.Pattern[str],
    timeout_s: float,
) -> str:
    deadline_s = time.monotonic() + timeout_s
    while True:
        match = listening.search(_read_log(log_path))
        if match:
            return match.group(1)
        if process.returncode is not None:
            raise ServerStartError(
                f"{name} exited with code {process.returncode} before listening:\n"
                f"{_tail(log_path, 20)}"
            )
        if time.monotonic() > deadline_s:
            raise ServerStartError(
                f"{name} did not print its listening line within {timeout_s:.0f} s:\n"
                f"{_tail(log_path, 20)}"
            )
        await asyncio.sleep(_POLL_INTERVAL_S)


async def _stop(name: str, process: asyncio.subprocess.Process, timeout_s: float) -> int:
    """SIGTERM, wait up to `timeout_s`, then SIGKILL. Returns the exit code."""
    if process.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGTERM)
        try:
            return await asyncio.wait_for(process.wait(), timeout_s)
        except TimeoutError:
            print(
                f"cairn-bench: {name} did not stop within {timeout_s:.0f} s of SIGTERM; SIGKILL",
                file=sys.stderr,
            )
            with contextlib.suppress(ProcessLookupError):
                process.kill()
    return await process.wait()


_CLOCK_TICKS_PER_S = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def cpu_seconds(root_pid: int) -> float | None:
    """User + system CPU seconds of a process and its live descendants (Linux /proc).

    None when /proc is unavailable or the process is gone. Descendants matter if a
    server ever forks workers; for a single-process server it is just the pid.
    """
    children: dict[int, list[int]] = {}
    times: dict[int, float] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return None
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as handle:
                stat = handle.read()
        except OSError:
            continue
        # Fields after the parenthesised command name, which may hold spaces.
        fields = stat[stat.rfind(")") + 2 :].split()
        pid = int(entry)
        parent = int(fields[1])
        times[pid] = (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS_PER_S
        children.setdefault(parent, []).append(pid)
    if root_pid not in times:
        return None
    total_s = 0.0
    pending = [root_pid]
    while pending:
        pid = pending.pop()
        total_s += times.get(pid, 0.0)
        pending.extend(children.get(pid, ()))
    return total_s


# What a storage pod's threads do, told apart by the names the kernel shows
# (/proc/PID/task/TID/comm): RocksDB names its flush and compaction threads
# `rocksdb:high`/`rocksdb:low`, gRPC core its I/O and timer threads `event_engine`,
# `grpc_global_tim*` and `lifeguard`; Python threads keep the process's name. Our
# processes have gRPC do socket I/O on grpc.aio's poller, a Python thread (see
# cairn.common.grpc_runtime): that work counts in `other`, beside the WAL's sync thread.
THREAD_GROUPS = ("main", "rocksdb", "grpc", "other")
_GRPC_THREAD_NAMES = ("event_engine", "lifeguard")


def thread_group(tid: int, pid: int, name: str) -> str:
    """`main` (the event loop's thread), `rocksdb`, `grpc`, or `other` (Python
    threads: the WAL's sync thread, executors, grpc.aio's poller)."""
    if tid == pid:
        return "main"
    if name.startswith("rocksdb"):
        return "rocksdb"
    if name.startswith("grpc") or name in _GRPC_THREAD_NAMES:
        return "grpc"
    return "other"


def main_thread_wait_s(pid: int) -> float | None:
    """Seconds the process's main thread (a pod's event loop) has spent runnable
    but waiting for a CPU: the run-queue delay the kernel counts for it
    (/proc/PID/task/PID/schedstat). Where pods, clients and RocksDB share too few
    cores, every request waits behind this. None when the kernel does not report it
    or the process is gone."""
    try:
        with open(f"/proc/{pid}/task/{pid}/schedstat", encoding="ascii") as handle:
            waited_ns = int(handle.read().split()[1])
    except (OSError, IndexError, ValueError):
        return None
    return waited_ns / 1e9


def _stat_cpu_s(stat: str) -> float:
    fields = stat[stat.rfind(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS_PER_S


def thread_cpu_seconds(pid: int) -> dict[str, float] | None:
    """A process's user + system CPU seconds by thread group (THREAD_GROUPS). The
    threads that have exited count as `other`: the process's total keeps their time,
    so the groups always add up to it. None when /proc is unavailable or the process
    is gone."""
    groups = dict.fromkeys(THREAD_GROUPS, 0.0)
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
            total_s = _stat_cpu_s(handle.read())
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    for entry in tids:
        try:
            with open(
                f"/proc/{pid}/task/{entry}/stat", encoding="ascii", errors="replace"
            ) as handle:
                stat = handle.read()
        except OSError:
            continue  # the thread ended meanwhile: its time is in the total
        name = stat[stat.find("(") + 1 : stat.rfind(")")]
        groups[thread_group(int(entry), pid, name)] += _stat_cpu_s(stat)
    live_s = sum(groups.values())
    groups["other"] += max(0.0, total_s - live_s)
    return groups
