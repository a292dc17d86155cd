"""Whether a request was sent to the shard its key routes to. Pure.

Clients route each key to a shard by hashing it (cairn.common.hashing). A client
that hashes otherwise than the shard map's XXH3 router (the `oxia` 0.2.1 Python
client uses XXH64) still gets its requests answered: the pod serves whatever
shard it is asked for. But what it writes lands on shards where XXH3 clients do
not look for it. The pod cannot refuse such requests without breaking that
client, so it counts them and says so in its log, from the first key of each
write request (one hash per request, not per operation: a client that hashes
another way sends nearly every request to the wrong shard). Reads are not
checked: a get names no partition key, so the pod cannot tell a key read
through its partition key from a misrouted one.
"""

from __future__ import annotations

from cairn.common.hashing import HashRange, key_hash
from cairn.proto import oxia_client_pb2 as pb


def routing_key_of_write(request: pb.WriteRequest) -> str | None:
    """The routing key of a write's first put or delete (range deletions go to
    every shard, so they prove nothing); None if it has neither."""
    if request.puts:
        put = request.puts[0]
        return put.partition_key if put.HasField("partition_key") else put.key
    if request.deletes:
        delete = request.deletes[0]
        return delete.partition_key if delete.HasField("partition_key") else delete.key
    return None


def misrouted(routing_key: str | None, hash_range: HashRange | None) -> bool:
    """Whether XXH3 routes `routing_key` outside the shard's `hash_range`."""
    if routing_key is None or hash_range is None:
        return False
    return not hash_range.contains(key_hash(routing_key))
