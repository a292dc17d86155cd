"""The replication protocol's decisions, free of I/O (see ARCHITECTURE.md section 4)."""
