"""The README test's Markdown reader: fenced blocks, their annotations, links, and
the pattern comparison of shown output."""

from __future__ import annotations

from pathlib import Path

import pytest

from readme.markdown_blocks import (
    MarkdownError,
    linked_documents,
    output_matches,
    parse_blocks,
)

DOC = """# Title

```sh
echo one
```

<!-- readme: output -->

```
one
```

<!-- readme: run cluster=insecure background="curl -N" -->
~~~python
print("~~~ and ``` inside")
~~~

<!-- readme: skip kubernetes -- needs a cluster -->
````
```
kubectl apply -k x
````
"""


def test_blocks_in_order_with_language_annotation_and_content() -> None:
    blocks = parse_blocks(DOC, "doc.md")
    assert [(b.line, b.language, b.annotation.kind, b.annotated) for b in blocks] == [
        (3, "sh", "run", False),
        (9, "", "output", True),
        (14, "python", "run", True),
        (19, "", "skip", True),
    ]
    assert blocks[0].text == "echo one\n"
    assert blocks[2].annotation.options == {"cluster": "insecure", "background": "curl -N"}
    assert blocks[2].text == 'print("~~~ and ``` inside")\n'
    assert blocks[3].annotation.words == ("kubernetes",)
    assert blocks[3].annotation.reason == "needs a cluster"
    assert blocks[3].text == "```\nkubectl apply -k x\n"
    assert blocks[3].where == "doc.md:19"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("<!-- readme: run -->\nprose\n```\nx\n```\n", "annotation without a block"),
        ("<!-- readme: run -->\n", "annotation without a block"),
        ("<!-- readme: execute -->\n```\nx\n```\n", "kind must be one of"),
        ("<!-- readme: skip docker -->\n```\nx\n```\n", "gives a reason"),
        ("<!-- readme: skip -- why -->\n```\nx\n```\n", "gives a reason"),
        ("```sh\nunclosed\n", "unclosed code block"),
    ],
)
def test_malformed_documents_are_refused(text: str, message: str) -> None:
    with pytest.raises(MarkdownError, match=message):
        parse_blocks(text)


def test_linked_documents_are_local_markdown_files(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("a", encoding="utf-8")
    readme = tmp_path / "README.md"
    readme.write_text(
        "[a](docs/a.md) [a again](docs/a.md#part) [web](https://x.org/b.md) "
        "[missing](docs/none.md) [image](docs/i.png)",
        encoding="utf-8",
    )
    assert linked_documents(readme) == [(tmp_path / "docs" / "a.md").resolve()]


@pytest.mark.parametrize(
    ("pattern", "output", "matches"),
    [
        ("a\nb\n", "a\nb  \n", True),
        ("a\nb\n", "a\nb\nc\n", False),
        ("a\n...\nd\n", "a\nb\nc\nd\n", True),
        ("a\n  ...\nd\n", "a\nd\n", True),
        ("a\n...\nd\n", "a\nb\n", False),
        ("ca /path/to/.cairn/x.crt\n", "ca /tmp/p-1/.cairn/x.crt\n", True),
        ("ca /path/to/.cairn/x.crt\n", "ca /tmp/p-1/.other/x.crt\n", False),
        ("ca /path/to/.cairn/x.crt\n", "ca relative/.cairn/x.crt\n", False),
        ("port 6648 (a+b)\n", "port 6648 (a+b)\n", True),
        ("port 6648\n", "port 6748\n", False),
    ],
)
def test_output_patterns(pattern: str, output: str, matches: bool) -> None:
    assert output_matches(pattern, output) is matches
