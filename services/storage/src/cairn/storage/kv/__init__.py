"""The shard's key-value state: user records and internal state in separate columns."""

from cairn.storage.kv.memory import MemoryKv
from cairn.storage.kv.rocks import RocksKv
from cairn.storage.kv.store import Change, Column, ColumnChanges, KvReader, KvStore

__all__ = ["Change", "Column", "ColumnChanges", "KvReader", "KvStore", "MemoryKv", "RocksKv"]
