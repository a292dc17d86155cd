"""The write-ahead log of a storage pod (see ``log.Wal`` for the durability contract)."""

from cairn.storage.wal.log import Wal, WalOptions
from cairn.storage.wal.record import WalCorruptionError, WalEntry, WalError

__all__ = ["Wal", "WalCorruptionError", "WalEntry", "WalError", "WalOptions"]
