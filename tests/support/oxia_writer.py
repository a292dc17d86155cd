"""The unmodified `oxia` PyPI client writing unique keys from a process of its own."""

from __future__ import annotations

import subprocess
import sys
import threading

# The PyPI client (0.2.1) reads the shard map once and its close() hangs once the
# map stream ended, so this writer runs in its own process (killed at the end) and
# builds a new client, through any pod that answers, whenever a put fails.
OXIA_WRITER_SCRIPT = """
import itertools, sys, time, oxia
addresses = sys.argv[1:]
counter = itertools.count()
for attempt in itertools.count():
    try:
        client = oxia.Client(addresses[attempt % len(addresses)])
    except Exception as error:
        print("ERR", type(error).__name__, flush=True)
        time.sleep(0.1)
        continue
    try:
        while True:
            key = f"/oxia/load/{next(counter):06d}"
            value = key.encode()
            print("TRY", key, flush=True)
            _, version = client.put(key, value)
            print("ACK", key, version.version_id(), flush=True)
    except Exception as error:
        print("ERR", type(error).__name__, flush=True)
        time.sleep(0.1)
"""


class OxiaWriter:
    """The oxia writer process; its acknowledged puts are read from its output."""

    def __init__(self, addresses: list[str]) -> None:
        self.lines: list[str] = []
        self._process = subprocess.Popen(
            [sys.executable, "-c", OXIA_WRITER_SCRIPT, *addresses],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        self._pump = threading.Thread(target=self._read, daemon=True)
        self._pump.start()

    def _read(self) -> None:
        assert self._process.stdout is not None
        with self._process.stdout as output:
            for line in output:
                self.lines.append(line.strip())

    def acked(self) -> dict[str, tuple[bytes, int]]:
        found = {}
        for line in list(self.lines):
            if line.startswith("ACK "):
                _, key, version = line.split()
                found[key] = (key.encode(), int(version))
        return found

    def stop(self) -> None:
        """Idempotent."""
        if self._process.poll() is None:
            self._process.kill()
        self._process.wait(timeout=30)
        self._pump.join(timeout=30)
