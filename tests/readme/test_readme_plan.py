"""How the README test turns blocks into launches and programs."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from readme.markdown_blocks import parse_blocks
from readme.readme_plan import PlanError, commands, launch_name, launches, plan, python_program

STATE = Path("/tmp/state/.cairn/cluster")

DOC = """
<!-- readme: run cluster=default not-run="./dev test" -- the suite itself -->
```sh
./dev run     # a cluster
./dev run --insecure
./dev test    # everything
```
<!-- readme: output -->
```
banner
```
<!-- readme: run cluster=insecure background="curl -N" -->
```sh
curl --cacert .cairn/cluster/ca.crt \\
  localhost:8080/x   # a remark
curl -N localhost:8080/feed
```
```python
print(1)
```
"""


def test_launches_are_named_by_their_flags() -> None:
    assert launch_name("./dev run") == "default"
    assert launch_name("./dev run --public-plaintext") == "public-plaintext"
    found = launches(parse_blocks(DOC))
    assert {name: launch.command for name, launch in found.items()} == {
        "default": "./dev run",
        "insecure": "./dev run --insecure",
    }


def test_steps_follow_the_annotations() -> None:
    blocks = parse_blocks(DOC)
    steps = plan(blocks, {"default": STATE, "insecure": STATE})
    assert [(step.block.line, step.cluster) for step in steps] == [
        (3, "default"),
        (13, "insecure"),
        (18, "insecure"),  # inherited from the block before
    ]
    first, second, third = steps
    assert first.launch is not None and first.launch.command == "./dev run"
    assert first.shows is blocks[1]
    script = first.argv[2]
    assert "# launched by the test: ./dev run     # a cluster" in script
    assert "# not run (the suite itself): ./dev test" in script
    assert second.launch is None and second.shows is None
    script = second.argv[2]
    assert f"curl --cacert {STATE}/ca.crt    localhost:8080/x   # a remark" in script
    assert "readme_background 'curl -N localhost:8080/feed'" in script
    assert third.argv == ("./dev", "exec", "python", "-") and third.stdin == "print(1)\n"


def test_shell_script_runs_a_background_command_until_it_prints(tmp_path: Path) -> None:
    doc = (
        '<!-- readme: run background="yes" -->\n```sh\nyes started\necho after\n```\n'
        '<!-- readme: run background="true" -->\n```sh\ntrue\n```\n'
    )
    steps = plan([*parse_blocks(doc), *parse_blocks("```sh\n./dev run\n```\n")], {"default": STATE})
    result = subprocess.run(steps[0].argv, capture_output=True, text=True, timeout=30, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("started\n") and result.stdout.endswith("after\n")
    # A background command that ends without printing fails its block.
    result = subprocess.run(steps[1].argv, capture_output=True, text=True, timeout=30, check=False)
    assert result.returncode != 0
    assert "background command printed nothing" in result.stderr


def test_a_failing_command_fails_its_block_and_is_named() -> None:
    steps = plan(
        parse_blocks("```sh\n./dev run\nfalse  # no\necho never\n```\n"), {"default": STATE}
    )
    result = subprocess.run(steps[0].argv, capture_output=True, text=True, timeout=30, check=False)
    assert result.returncode == 1 and result.stdout == ""
    assert "README command failed (exit status 1): false  # no" in result.stderr
    # Also inside the curl wrapper, and with compound commands left intact.
    text = "```sh\n./dev run\nfor i in 1; do\n  curl -s http://127.0.0.1:1/\ndone\n```\n"
    steps = plan(parse_blocks(text), {"default": STATE})
    result = subprocess.run(steps[0].argv, capture_output=True, text=True, timeout=30, check=False)
    assert result.returncode == 7, result.stderr
    assert "README command failed (exit status 7): curl -s http://127.0.0.1:1/" in result.stderr


def test_python_with_top_level_await_runs_in_a_coroutine() -> None:
    block = parse_blocks(
        "<!-- readme: run placeholder=break -->\n```python\n"
        "async for item in feed():\n    ...\nawait done()\n```\n"
    )[0]
    program = python_program(block, STATE)
    assert "async def readme_main():\n    async for item in feed():\n        break\n" in program
    assert program.endswith("asyncio.run(readme_main())\n")
    compile(program, "program", "exec")
    plain = parse_blocks("```python\nx = ...\n```\n")[0]
    assert python_program(plain, STATE) == "x = ...\n"


def test_continuation_lines_are_joined_and_comment_lines_dropped() -> None:
    assert commands("# intro\na \\\n  b\n\nc  # end\n") == ["a    b", "c  # end"]


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ("```sh\necho\n```\n", "no `./dev run` line starts cluster 'default'"),
        ("```sh\n./dev run\n```\n```yaml\na: 1\n```\n", "no way to run 'yaml'"),
        ("<!-- readme: output -->\n```\nx\n```\n```sh\n./dev run\n```\n", "follows no run"),
        ("<!-- readme: run clusterr=x -->\n```sh\n./dev run\n```\n", "unknown options"),
    ],
)
def test_blocks_it_cannot_account_for_are_refused(doc: str, message: str) -> None:
    with pytest.raises(PlanError, match=message):
        plan(parse_blocks(doc), {"default": STATE})
