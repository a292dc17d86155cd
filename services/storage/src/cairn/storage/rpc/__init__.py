"""gRPC servicers: decode, call, encode. No protocol decisions live here."""
