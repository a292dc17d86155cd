"""The I/O side of replication: a leader's streams to its followers, and the
channels between storage pods. The decisions are in `core.replication`."""
