"""Who a caller is (tokens.py, plus identity.py for certificates), what it may do
(rules.py), and the one file that configures both (config.py). Pure: no gRPC,
no HTTP, no asyncio; the servers call these at their edges."""
