"""The checks of blocks that need another platform find what is wrong in them."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from readme.markdown_blocks import parse_blocks
from readme.static_checks import CHECKS

ROOT = Path(__file__).resolve().parents[2]
TOOLS = Path(sys.executable).parent


@pytest.mark.parametrize(
    ("category", "block", "problem"),
    [
        ("kubernetes", "kubectl apply -f kustomize/base/none.yaml", "no file"),
        ("kubernetes", "kubectl apply -k kustomize/overlays/none", "kubectl kustomize fails"),
        (
            "kubernetes",
            "kubectl apply -f kustomize/base/crd.yaml\n"
            "kubectl wait --for condition=established crd/cairns.cairn.dev",
            "no CRD crd/cairns.cairn.dev",
        ),
        (
            "kubernetes",
            "kubectl apply -k kustomize/overlays/production\n"
            "kubectl -n cairn-dev get cairncluster cairn",
            "nothing applied above is cairncluster cairn-dev/cairn",
        ),
        ("kubernetes", "kubectl delete pod x", "no static check"),
        ("docker", "for c in storage gatewy; do\n  docker build --target $c .\ndone", "gatewy"),
        ("docker", "docker compose cp certs:/etc/cairn ./x", "mounts nothing at /etc/cairn"),
        ("docker", "./dev cairn --adress cairn-storage-0:6648 get /a", "no option --adress"),
        ("docker", "curl https://localhost:8443/docs", "publishes no port 8443"),
        ("docker", "curl https://cairn-storage-9:6648/", "no compose service cairn-storage-9"),
        ("spark", "```python\nfrom cairn.spark import Nothing\n", "imports fail"),
        ("spark", '```python\nspark.read.format("cairn").option("adress", "a")\n', "'adress'"),
        ("spark", "```python\nif x\n", "does not compile"),
        ("spark", "```bash\ncairn-cdc --address a:1 --onse\n", "has no option --onse"),
        ("spark", "```bash\nspark-submit x.py\n", "no static check"),
    ],
)
def test_a_wrong_block_is_reported(category: str, block: str, problem: str) -> None:
    text = block if block.startswith("```") else f"```\n{block}\n"
    parsed = parse_blocks(f"<!-- readme: skip {category} -- test -->\n{text}```\n")[0]
    problems = CHECKS[category](parsed, ROOT, TOOLS)
    assert any(problem in found for found in problems), problems
