"""Run at start-up by the Python of a README example that uses the `oxia` 0.2.1
client (tests/readme puts this directory on PYTHONPATH for those only): the
client's start-up race is worked around from outside it, as in the test process
(support/oxia_startup.py). Without it, a loaded machine can leave the example's
`oxia.Client(...)` without a shard map, and its first put waits forever; the
README's reader meets the same race (docs/clients.md says so). Other Pythons
started on the way (the `dev` script's) have no oxia client: nothing to do."""

import importlib.util

if importlib.util.find_spec("oxia") is not None:
    from support.oxia_startup import install

    install()
