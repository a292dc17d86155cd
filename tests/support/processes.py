"""Real processes for end-to-end tests: a child whose output lines are collected
(`PipedProcess`), and the storage servers on it."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

LISTENING_PREFIX = "cairn-storage listening on "
INTERNAL_PREFIX = "cairn-storage internal on "


def auth_args(extra_args: Sequence[str]) -> list[str]:
    """Servers must be told how to authenticate: tests that do not say run open."""
    return [] if "--auth-config" in extra_args or "--no-auth" in extra_args else ["--no-auth"]


class PipedProcess:
    """A child process whose output lines a thread collects (in `output`, and for
    `wait_for`, which reads them as they come)."""

    def __init__(self) -> None:
        self.process: subprocess.Popen[str] | None = None
        self.output: list[str] = []
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._pump: threading.Thread | None = None

    def spawn(self, command: Sequence[str], env: dict[str, str] | None = None) -> None:
        self.output = []
        self._lines = queue.Queue()
        self.process = subprocess.Popen(
            list(command),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
        )
        stdout = self.process.stdout
        assert stdout is not None
        lines = self._lines

        def pump() -> None:
            with stdout:
                for line in stdout:
                    self.output.append(line)
                    lines.put(line)
            lines.put(None)

        self._pump = threading.Thread(target=pump, daemon=True)
        self._pump.start()

    def wait_for(self, predicate: Callable[[str], bool], timeout_s: float) -> str:
        """The first output line the predicate accepts; TimeoutError (after killing
        the process) or RuntimeError (it exited) otherwise."""
        deadline = time.monotonic() + timeout_s
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.kill()
                raise TimeoutError("process did not start:\n" + self.log_text())
            try:
                line = self._lines.get(timeout=remaining)
            except queue.Empty:
                continue
            if line is None:
                raise RuntimeError("process exited at start:\n" + self.log_text())
            if predicate(line):
                return line

    def log_text(self) -> str:
        return "".join(self.output)

    def signal(self, signum: int) -> None:
        assert self.process is not None
        self.process.send_signal(signum)

    def kill(self) -> None:
        """SIGKILL: no shutdown code runs."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=30)
        self._join()

    def stop(self, timeout_s: float = 30.0) -> int:
        """SIGTERM and wait for the exit (SIGKILL, then TimeoutExpired, after
        `timeout_s`)."""
        assert self.process is not None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=30)
            raise
        finally:
            self._join()

    def _join(self) -> None:
        # The pump closes the pipe at EOF, which comes once the process is gone.
        if self._pump is not None:
            self._pump.join(timeout=30)
            self._pump = None


class StandaloneProcess(PipedProcess):
    """`cairn-storage standalone` in a child process, on an ephemeral port."""

    def __init__(
        self, data_dir: Path, shards: int | None, extra_args: tuple[str, ...] = ()
    ) -> None:
        """`shards` None: leave the layout to `extra_args` (e.g. --namespace-spec)."""
        super().__init__()
        self.data_dir = data_dir
        self.shards = shards
        self.extra_args = extra_args
        self.address = ""
        self.internal_address = ""

    def command(self) -> list[str]:
        return [
            sys.executable, "-m", "cairn.storage", "standalone",
            *([] if "--tls-dir" in self.extra_args else ["--insecure"]),
            "--port", "0", "--data-dir", str(self.data_dir), "--log-level", "WARNING",
            "--metrics-port", "0",
            *(["--shards", str(self.shards)] if self.shards is not None else []),
            *auth_args(self.extra_args),
            *self.extra_args,
        ]  # fmt: skip

    def expects_internal_address(self) -> bool:
        return False

    def run_to_exit(self, timeout_s: float = 30.0) -> subprocess.CompletedProcess[str]:
        """Run the command expecting it to refuse to start."""
        return subprocess.run(
            self.command(), capture_output=True, text=True, timeout=timeout_s, check=False
        )

    def start(self, timeout_s: float = 30.0) -> str:
        self.address = self.internal_address = ""
        self.spawn(self.command())

        def listening(line: str) -> bool:
            if line.startswith(INTERNAL_PREFIX):
                self.internal_address = line[len(INTERNAL_PREFIX) :].strip()
            if line.startswith(LISTENING_PREFIX):
                self.address = line[len(LISTENING_PREFIX) :].strip()
            if not self.address:
                return False
            return bool(self.internal_address) or not self.expects_internal_address()

        self.wait_for(listening, timeout_s)
        return self.address


class NodeProcess(StandaloneProcess):
    """`cairn-storage node`: a storage pod in a cluster, on ephemeral ports the first
    time and on the same ports after a restart (its ensemble knows it by them)."""

    def __init__(
        self, data_dir: Path, extra_args: tuple[str, ...] = (), tls_dir: Path | None = None
    ) -> None:
        """`tls_dir`: the pod's certificates (internal mTLS, public TLS unless
        `--public-plaintext` is among `extra_args`); None: --insecure."""
        super().__init__(data_dir, None, extra_args)
        self.tls_dir = tls_dir
        self.port = 0
        self.internal_port = 0

    def expects_internal_address(self) -> bool:
        return True

    def command(self) -> list[str]:
        return [
            sys.executable, "-m", "cairn.storage", "node",
            *(["--tls-dir", str(self.tls_dir)] if self.tls_dir else ["--insecure"]),
            "--port", str(self.port), "--internal-port", str(self.internal_port),
            "--data-dir", str(self.data_dir), "--log-level", "INFO",
            "--metrics-port", "0",
            *auth_args(self.extra_args),
            *self.extra_args,
        ]  # fmt: skip

    def start(self, timeout_s: float = 30.0) -> str:
        address = super().start(timeout_s)
        self.port = int(self.address.rsplit(":", 1)[1])
        self.internal_port = int(self.internal_address.rsplit(":", 1)[1])
        return address
