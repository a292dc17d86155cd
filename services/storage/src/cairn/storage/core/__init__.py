"""The shard's protocol decisions, free of I/O: no asyncio, gRPC, disk or clock here."""
