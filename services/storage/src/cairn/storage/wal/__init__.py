"""The write-ahead log of a storage pod (see ``log.Wal`` for the durability contract)."""

from cairn.storage.core.entries import LogEntry
from cairn.storage.wal.log import Wal, WalOptions
from cairn.storage.wal.record import WalCorruptionError, WalError

__all__ = ["LogEntry", "Wal", "WalCorruptionError", "WalError", "WalOptions"]
