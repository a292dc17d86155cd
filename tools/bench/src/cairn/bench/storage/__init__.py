"""cairn-bench: drive a Cairn storage server over gRPC and print honest figures."""
