"""Real storage server processes for end-to-end tests."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

LISTENING_PREFIX = "cairn-storage listening on "
INTERNAL_PREFIX = "cairn-storage internal on "


class StandaloneProcess:
    """`cairn-storage standalone` in a child process, on an ephemeral port."""

    def __init__(
        self, data_dir: Path, shards: int | None, extra_args: tuple[str, ...] = ()
    ) -> None:
        """`shards` None: leave the layout to `extra_args` (e.g. --namespace-spec)."""
        self.data_dir = data_dir
        self.shards = shards
        self.extra_args = extra_args
        self.process: subprocess.Popen[str] | None = None
        self.address = ""
        self.internal_address = ""
        self.output: list[str] = []
        self._pump: threading.Thread | None = None

    def command(self) -> list[str]:
        return [
            sys.executable, "-m", "cairn.storage", "standalone",
            "--port", "0", "--data-dir", str(self.data_dir), "--log-level", "WARNING",
            *(["--shards", str(self.shards)] if self.shards is not None else []),
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
        self.process = subprocess.Popen(
            self.command(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        lines: queue.Queue[str | None] = queue.Queue()
        stdout = self.process.stdout
        assert stdout is not None

        def pump() -> None:
            with stdout:
                for line in stdout:
                    self.output.append(line)
                    lines.put(line)
            lines.put(None)

        self._pump = threading.Thread(target=pump, daemon=True)
        self._pump.start()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                break
            if line is None:
                raise RuntimeError("server exited before listening:\n" + "".join(self.output))
            if line.startswith(INTERNAL_PREFIX):
                self.internal_address = line[len(INTERNAL_PREFIX) :].strip()
            if line.startswith(LISTENING_PREFIX):
                self.address = line[len(LISTENING_PREFIX) :].strip()
                if not self.expects_internal_address():
                    return self.address
            if self.address and self.internal_address:
                return self.address
        self.kill()
        raise TimeoutError("server did not start:\n" + "".join(self.output))

    def signal(self, signum: int) -> None:
        assert self.process is not None
        self.process.send_signal(signum)

    def kill(self) -> None:
        """SIGKILL: no shutdown code runs."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=30)
        self._join_pump()

    def _join_pump(self) -> None:
        # The pump closes the pipe at EOF, which comes once the process is gone.
        if self._pump is not None:
            self._pump.join(timeout=30)
            self._pump = None

    def stop(self, timeout_s: float = 30.0) -> int:
        """SIGTERM and wait for a clean exit."""
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
            self._join_pump()


class NodeProcess(StandaloneProcess):
    """`cairn-storage node`: a storage pod in a cluster, on ephemeral ports the first
    time and on the same ports after a restart (its ensemble knows it by them)."""

    def __init__(self, data_dir: Path, extra_args: tuple[str, ...] = ()) -> None:
        super().__init__(data_dir, None, extra_args)
        self.port = 0
        self.internal_port = 0

    def expects_internal_address(self) -> bool:
        return True

    def command(self) -> list[str]:
        return [
            sys.executable, "-m", "cairn.storage", "node",
            "--port", str(self.port), "--internal-port", str(self.internal_port),
            "--data-dir", str(self.data_dir), "--log-level", "INFO",
            *self.extra_args,
        ]  # fmt: skip

    def start(self, timeout_s: float = 30.0) -> str:
        self.address = self.internal_address = ""
        address = super().start(timeout_s)
        self.port = int(self.address.rsplit(":", 1)[1])
        self.internal_port = int(self.internal_address.rsplit(":", 1)[1])
        return address

    def log_text(self) -> str:
        return "".join(self.output)
