"""`cairn perf`: a load generator for any Oxia-compatible endpoint, or Cairn's gateway.

    options.py    the settings (one frozen object) and their command-line flags
    workload.py   pure: which key, read or write, the fixed-rate schedule
    stats.py      pure: per-interval and whole-run tallies, their lines and summary
    targets.py    the two ways to reach a server: gRPC through AsyncClient, or HTTP
                  through the REST gateway
    driver.py     the run: callers, warmup, measured window, drain, reporting

Callers each do one operation at a time. Flat out (`--rate 0`) latency runs from
an operation's start; at a target rate the run is open loop: operations have
scheduled start times on a fixed-rate schedule shared by the callers, and latency
runs from the scheduled time, so an operation that waited for a free caller
carries that wait (no coordinated omission).
"""
