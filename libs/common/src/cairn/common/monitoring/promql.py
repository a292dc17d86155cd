"""The metric and label names a PromQL expression uses: enough of a lexer to check
dashboards and rules against what a scrape holds (Prometheus parses the whole
expression itself when it evaluates it; this only has to find the names).

Found: each selector's metric name and the label names of its matchers, and the
label names of `by`/`without`/`on`/`ignoring`/`group_left`/`group_right` lists.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# Words that are not metric names when they stand alone.
KEYWORDS = frozenset(
    {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or"}
    | {"unless", "offset", "atan2", "inf", "nan"}
)
# Aggregations may take their grouping before their argument: `sum by (a) (x)`.
AGGREGATIONS = frozenset(
    {"sum", "min", "max", "avg", "count", "stddev", "stdvar", "topk", "bottomk"}
    | {"quantile", "count_values", "group"}
)
GROUPINGS = frozenset({"by", "without", "on", "ignoring", "group_left", "group_right"})
_TOKEN = re.compile(
    r"""\s*(?:
      (?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`)
    | (?P<number>(?:0x[0-9a-fA-F]+|[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)[a-zA-Z]*)
    | (?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)
    | (?P<op>=~|!~|!=|==|>=|<=|[-+*/%^<>=(){}\[\],@:])
    )""",
    re.VERBOSE,
)


@dataclass(frozen=True)
class Selector:
    metric: str  # "" when only `__name__` matchers name it
    labels: frozenset[str]


@dataclass(frozen=True)
class Names:
    selectors: tuple[Selector, ...]
    grouping_labels: frozenset[str]

    @property
    def metrics(self) -> frozenset[str]:
        return frozenset(s.metric for s in self.selectors if s.metric)


def tokens(expr: str) -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    position = 0
    expr = expr.rstrip()
    while position < len(expr):
        match = _TOKEN.match(expr, position)
        if match is None or match.end() == position:
            raise ValueError(f"cannot read {expr[position : position + 20]!r} in {expr!r}")
        kind = match.lastgroup
        assert kind is not None
        found.append((kind, match.group(kind)))
        position = match.end()
    return found


def _matchers(found: list[tuple[str, str]], start: int) -> tuple[set[str], int, str]:
    """Label names in `{...}` from `found[start]` (the brace); the index after it,
    and the metric named by a `__name__="..."` matcher, if any."""
    labels: set[str] = set()
    name = ""
    index = start + 1
    while found[index] != ("op", "}"):
        kind, text = found[index]
        if kind == "name":
            label, value = text, found[index + 2][1]
            if label == "__name__" and found[index + 1][1] == "=":
                name = value[1:-1]
            else:
                labels.add(label)
            index += 3
        else:
            index += 1  # a comma
    return labels, index + 1, name


def names(expr: str) -> Names:
    found = tokens(expr)
    selectors: list[Selector] = []
    grouping: set[str] = set()
    index = 0
    while index < len(found):
        kind, text = found[index]
        following = found[index + 1] if index + 1 < len(found) else ("", "")
        if kind == "op" and text == "[":  # a range or subquery: durations only
            index = next(i for i in range(index, len(found)) if found[i] == ("op", "]")) + 1
        elif kind == "op" and text == "{":  # a selector with no metric name in front
            labels, index, metric = _matchers(found, index)
            selectors.append(Selector(metric, frozenset(labels)))
        elif kind == "name" and text in GROUPINGS and following == ("op", "("):
            end = next(i for i in range(index, len(found)) if found[i] == ("op", ")"))
            grouping.update(t for k, t in found[index + 2 : end] if k == "name")
            index = end + 1
        elif kind == "name" and text == "offset":
            index += 2
        elif kind == "name" and (
            following == ("op", "(")
            or text.lower() in KEYWORDS
            or (text in AGGREGATIONS and following[0] == "name" and following[1] in GROUPINGS)
        ):
            index += 1  # a function, an aggregation or an operator word
        elif kind == "name":
            if following == ("op", "{"):
                labels, index, _ = _matchers(found, index + 1)
            else:
                labels, index = set(), index + 1
            selectors.append(Selector(text, frozenset(labels)))
        else:
            index += 1
    return Names(tuple(selectors), frozenset(grouping))


_LABEL_VALUES = re.compile(r"^\s*label_values\((?:(?P<selector>.+),\s*)?(?P<label>\w+)\s*\)\s*$")


def variable_names(query: str) -> Names:
    """Names used by a Grafana `label_values(selector, label)` variable query."""
    match = _LABEL_VALUES.match(query)
    if match is None:
        raise ValueError(f"not a label_values() query: {query!r}")
    selector = names(match.group("selector") or "")
    return Names(selector.selectors, selector.grouping_labels | {match.group("label")})
