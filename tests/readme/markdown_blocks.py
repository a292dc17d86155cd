"""The fenced code blocks of a Markdown document, with the annotation that says how
the README test treats each (issue 47).

An annotation is an HTML comment on the line before a block's opening fence (blank
lines between are allowed), invisible on a rendered page:

    <!-- readme: KIND [KEY=VALUE ...] [-- REASON] -->

KIND is `run` (the default for a block without one), `output` (the block shows the
previous block's output) or `skip` (the block cannot run here; its first option
names why, e.g. `skip kubernetes -- ...`, and a REASON is required). Values are
shell-quoted when they hold spaces. A `<!-- readme:` comment that annotates no block
is an error, so that a misplaced one cannot silently leave a block unchecked.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

KINDS = ("run", "output", "skip")

_ANNOTATION = re.compile(r"^\s*<!--\s*readme:(?P<body>.*?)-->\s*$")
_FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,})(?P<info>[^`]*)$")
_LINK = re.compile(r"\]\((?P<target>[^)#\s]+\.md)(?:#[^)]*)?\)")


class MarkdownError(ValueError):
    """The document's blocks or annotations are malformed."""


@dataclass(frozen=True)
class Annotation:
    kind: str
    # Bare words (e.g. the reason category of a skip) in order, then KEY=VALUE options.
    words: tuple[str, ...] = ()
    options: dict[str, str] = field(default_factory=dict)
    reason: str = ""


RUN_BY_DEFAULT = Annotation("run")


@dataclass(frozen=True)
class Block:
    source: str  # the document's path, for messages
    line: int  # 1-based line of the opening fence
    language: str  # first word of the info string, lower case; "" when none
    text: str  # the block's content, ending with a newline unless empty
    annotation: Annotation
    annotated: bool  # False when the annotation is the default (no comment)

    @property
    def where(self) -> str:
        return f"{self.source}:{self.line}"


def parse_annotation(body: str, where: str) -> Annotation:
    """The annotation in the text between `readme:` and `-->`."""
    spec, _, reason = body.partition(" -- ")
    try:
        tokens = shlex.split(spec)
    except ValueError as error:
        raise MarkdownError(f"{where}: unreadable annotation {body!r}: {error}") from error
    if not tokens or tokens[0] not in KINDS:
        raise MarkdownError(f"{where}: annotation kind must be one of {KINDS}: {body!r}")
    words: list[str] = []
    options: dict[str, str] = {}
    for token in tokens[1:]:
        key, equals, value = token.partition("=")
        if equals:
            options[key] = value
        else:
            words.append(token)
    annotation = Annotation(tokens[0], tuple(words), options, reason.strip())
    if annotation.kind == "skip" and (not annotation.words or not annotation.reason):
        raise MarkdownError(f"{where}: a skip names a category and gives a reason: {body!r}")
    return annotation


def parse_blocks(text: str, source: str = "<markdown>") -> list[Block]:
    """Every fenced block of `text` in document order, with its annotation."""
    blocks: list[Block] = []
    pending: tuple[Annotation, int] | None = None
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        line = lines[index]
        number = index + 1
        annotation_match = _ANNOTATION.match(line)
        fence_match = _FENCE.match(line)
        if annotation_match:
            if pending is not None:
                raise MarkdownError(f"{source}:{pending[1]}: annotation without a block")
            pending = (parse_annotation(annotation_match["body"], f"{source}:{number}"), number)
        elif fence_match:
            fence = fence_match["fence"]
            closing = re.compile(rf"^ {{0,3}}{fence[0]}{{{len(fence)},}}\s*$")
            end = index + 1
            while end < len(lines) and not closing.match(lines[end]):
                end += 1
            if end == len(lines):
                raise MarkdownError(f"{source}:{number}: unclosed code block")
            body = lines[index + 1 : end]
            info = fence_match["info"].strip().split()
            annotation = pending[0] if pending else RUN_BY_DEFAULT
            blocks.append(
                Block(
                    source=source,
                    line=number,
                    language=info[0].lower() if info else "",
                    text="".join(f"{item}\n" for item in body),
                    annotation=annotation,
                    annotated=pending is not None,
                )
            )
            pending = None
            index = end
        elif line.strip() and pending is not None:
            raise MarkdownError(f"{source}:{pending[1]}: annotation without a block")
        index += 1
    if pending is not None:
        raise MarkdownError(f"{source}:{pending[1]}: annotation without a block")
    return blocks


def linked_documents(path: Path) -> list[Path]:
    """The Markdown files in the repository that `path` links to, in link order."""
    found: list[Path] = []
    for match in _LINK.finditer(path.read_text(encoding="utf-8")):
        target = match["target"]
        if "://" in target:
            continue
        linked = (path.parent / target).resolve()
        if linked.is_file() and linked not in found:
            found.append(linked)
    return found


def output_matches(pattern: str, output: str) -> bool:
    """Whether `output` is what a README output block shows: line by line (trailing
    spaces aside), where a line that is only `...` stands for any number of lines and
    `/path/to/` for any absolute directory."""
    wanted = [line.rstrip() for line in pattern.splitlines()]
    actual = [line.rstrip() for line in output.splitlines()]
    return _match_lines(wanted, actual)


def _line_regex(line: str) -> re.Pattern[str]:
    parts = [re.escape(part) for part in line.split("/path/to/")]
    return re.compile("/(?:[^\\s/]+/)*".join(parts) + r"\Z")


def _match_lines(wanted: list[str], actual: list[str]) -> bool:
    if not wanted:
        return not actual
    head, rest = wanted[0], wanted[1:]
    if head.strip() == "...":
        return any(_match_lines(rest, actual[skip:]) for skip in range(len(actual) + 1))
    return (
        bool(actual) and bool(_line_regex(head).match(actual[0])) and _match_lines(rest, actual[1:])
    )
