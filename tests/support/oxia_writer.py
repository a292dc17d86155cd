"""The unmodified `oxia` PyPI client writing unique keys from a process of its own."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

# The PyPI client (0.2.1) reads the shard map once and its close() hangs once the
# map stream ended, so this writer runs in its own process (killed at the end) and
# builds a new client whenever a put fails. It builds one through every pod at once
# and writes through the first that starts: a client started through a pod that is
# down or has no map yet waits the client's own 30 s for one, and so does one whose
# map thread lost the client's start-up race (it may get the first map before the
# constructor made the barrier it meets it at, and die: AttributeError).
OXIA_WRITER_SCRIPT = """
import itertools, queue, sys, threading, time, oxia
addresses = sys.argv[1:]
counter = itertools.count()

def start(address, started):
    try:
        started.put(oxia.Client(address))
    except Exception as error:
        started.put(error)

def first_client():
    started = queue.Queue()  # this round's: a later round ignores the stragglers
    for address in addresses:
        threading.Thread(target=start, args=(address, started), daemon=True).start()
    for _ in addresses:
        outcome = started.get()
        if isinstance(outcome, oxia.Client):
            return outcome
        print("ERR", type(outcome).__name__, flush=True)
    return None

while True:
    client = first_client()
    if client is None:
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

    def wait_until_writing(self, timeout_s: float = 60.0) -> None:
        """Return once a put was acknowledged. Faults must start after this: on a
        loaded machine the process takes seconds to start and read its shard map,
        and faults that begin and end meanwhile leave it nothing to write through."""
        deadline = time.monotonic() + timeout_s
        while not any(line.startswith("ACK ") for line in list(self.lines)):
            assert self._process.poll() is None, self.lines[-20:]
            assert time.monotonic() < deadline, ("the oxia writer never wrote", self.lines[-20:])
            time.sleep(0.05)

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
