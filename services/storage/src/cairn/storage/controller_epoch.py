"""The highest controller epoch a storage pod has seen, kept durably in one
small file of its data directory (`controller-epoch`), so that a restarted pod
still refuses the controllers it refused before (see core/controller_epoch.py).

One epoch per pod, not per shard: an epoch is the controller's, cluster-wide, so
a call of epoch e proves every older controller stale for every shard. It also
guards the calls that have no replica to keep it in yet (a NewTerm creating one,
a shard map push). A pod whose disk is wiped forgets it, along with its replicas:
it then holds nothing an old controller could damage, and the newer controller
teaches it again with its first call (every shard map push carries the epoch).
"""

from __future__ import annotations

from pathlib import Path

from cairn.common.files import write_atomically
from cairn.storage.core.controller_epoch import NO_EPOCH, admit

EPOCH_FILE = "controller-epoch"


class ControllerEpochFence:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._highest = self._load()

    @property
    def highest(self) -> int:
        return self._highest

    def _load(self) -> int:
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return NO_EPOCH
        # Written atomically, so never torn: anything unreadable is damage, and
        # starting from epoch 0 would take calls from controllers refused before.
        try:
            return int(text.strip())
        except ValueError:
            raise ValueError(f"{self.path}: not a controller epoch: {text[:40]!r}") from None

    def admit(self, epoch: int) -> None:
        """Take a call of `epoch`, or raise StaleControllerEpoch. A newer epoch is
        durable before this returns. Synchronous on purpose: with no `await`
        between the check and the update, no call of an older epoch can be let in
        once a newer one was; the write (one fsync) happens once per takeover."""
        highest = admit(self._highest, epoch)
        if highest != self._highest:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            write_atomically(self.path, f"{highest}\n")
            self._highest = highest
