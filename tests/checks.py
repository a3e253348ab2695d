"""``make lint``'s check of the tests themselves: each test can fail, and none rests on a clock.

Refused, with the file and line of each:

- a test function with no assertion: no ``assert``, no ``pytest.raises``/``warns``/``fail``, and no call of a
  helper that asserts (named ``assert_*``, ``check_*``, ``expect*``, ``verify*``, ``validate*``, or a Playwright
  ``expect(...).to_*``): a test that cannot fail proves nothing;
- a fixed sleep followed directly by an assertion (``time.sleep(...)`` or ``await asyncio.sleep(...)``, then
  ``assert``): on a loaded machine the sleep is too short and the test fails for nothing, and when it is
  long enough it is time wasted. Wait for a condition with a deadline instead, or, to show that something
  did *not* happen, for a later event that proves the system went past the point where it would have;
- an assertion on how long something took: a comparison of a test's own clock readings
  (``time.monotonic()``, ``time.perf_counter()``, ``loop.time()``) or of a name that says it holds a
  duration (``elapsed``, ``took``, ``duration``, ``latency``, ``lateness``, ``p50``/``p99``) under an upper
  bound. Speed is measured by benchmarks (``make bench-*``), never asserted. Not refused: a lower bound (the
  code waited at least its backoff), a clock against a ``deadline`` (a wait for a condition), two durations
  compared (an order), and a line that says ``# not a duration: <why>``.

``python -m tests.checks [paths...]`` (default: ``tests``). Exit status 1 when anything is refused.
"""

from __future__ import annotations

import ast
import itertools
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

_ASSERTING_HELPER = re.compile(r"^(assert_|check_|expect|verify|validate|to_have_|to_be_|not_to_)")
_RAISES = {"raises", "warns", "fail", "deprecated_call"}
_DURATION_NAME = re.compile(r"(^|_)(elapsed|took|duration|latency|lateness|p50|p90|p99)(_|$)", re.IGNORECASE)
_DEADLINE_NAME = re.compile(r"deadline|until|end", re.IGNORECASE)
_OPT_OUT = "# not a duration:"
_CLOCKS = {"monotonic", "perf_counter", "time"}


@dataclass(frozen=True)
class Finding:
    path: Path
    line: int
    rule: str
    what: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.rule}: {self.what}"


def _callee(call: ast.Call) -> str:
    func = call.func
    if isinstance(func, ast.Attribute):
        return func.attr
    return func.id if isinstance(func, ast.Name) else ""


def _asserts(function: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    for node in ast.walk(function):
        if isinstance(node, ast.Assert):
            return True
        if isinstance(node, ast.Attribute) and node.attr in _RAISES:
            return True
        if isinstance(node, ast.Call) and _ASSERTING_HELPER.match(_callee(node)):
            return True
    return False


def _is_sleep(statement: ast.stmt) -> bool:
    if not isinstance(statement, ast.Expr):
        return False
    value = statement.value.value if isinstance(statement.value, ast.Await) else statement.value
    if not (isinstance(value, ast.Call) and _callee(value) == "sleep"):
        return False
    # sleep(0) is one turn of the event loop, the same on any machine: the tasks ready run one step.
    return not (value.args and isinstance(value.args[0], ast.Constant) and value.args[0].value == 0)


def _reads_a_clock(node: ast.AST) -> bool:
    for inner in ast.walk(node):
        if isinstance(inner, ast.Call) and _callee(inner) in _CLOCKS:
            func = inner.func
            owner = func.value if isinstance(func, ast.Attribute) else None
            # time.time(), time.monotonic(), loop.time(), asyncio.get_running_loop().time(): not datetime's
            if isinstance(owner, ast.Name) and owner.id in ("time", "loop"):
                return True
            if isinstance(owner, ast.Call) and _callee(owner) in ("get_running_loop", "get_event_loop"):
                return True
    return False


def _names_a_duration(node: ast.AST) -> bool:
    for inner in ast.walk(node):
        name = inner.id if isinstance(inner, ast.Name) else inner.attr if isinstance(inner, ast.Attribute) else ""
        if name and _DURATION_NAME.search(name):
            return True
        text = inner.value if isinstance(inner, ast.Constant) and isinstance(inner.value, str) else ""
        if text.endswith("_seconds") or (text and _DURATION_NAME.search(text)):
            return True  # a metric in seconds, or a field of a report, read by name: window["lateness_p99_s"]
    return False


def _timed(node: ast.AST) -> bool:
    return _reads_a_clock(node) or _names_a_duration(node)


def _a_deadline(node: ast.AST) -> bool:
    return any(
        isinstance(inner, ast.Name | ast.Attribute)
        and _DEADLINE_NAME.search(inner.id if isinstance(inner, ast.Name) else inner.attr)
        for inner in ast.walk(node)
    )


def _bounds_a_duration(test: ast.Assert) -> bool:
    """An upper bound on a duration: ``took < 1.0``, ``p99 <= bound``, ``5 > elapsed``. A lower bound (the
    code waited at least its backoff) does not depend on the machine's speed; a clock compared with a
    deadline is a wait for a condition; two durations compared are an order."""
    for node in ast.walk(test.test):
        if not isinstance(node, ast.Compare):
            continue
        sides = [node.left, *node.comparators]
        for op, (left, right) in zip(node.ops, itertools.pairwise(sides), strict=True):
            if isinstance(op, ast.Lt | ast.LtE):
                small, bound = left, right
            elif isinstance(op, ast.Gt | ast.GtE):
                small, bound = right, left
            else:
                continue
            if _timed(small) and not _timed(bound) and not _a_deadline(bound):
                return True
    return False


def check_tree(path: Path, tree: ast.Module, lines: list[str]) -> Iterator[Finding]:
    for node in ast.walk(tree):
        for field in ("body", "orelse", "finalbody", "handlers"):
            statements = getattr(node, field, None)
            if not isinstance(statements, list):
                continue
            for first, then in itertools.pairwise(statements):
                if _is_sleep(first) and isinstance(then, ast.Assert):
                    yield Finding(path, then.lineno, "sleep-then-assert", ast.unparse(first).strip())
        if isinstance(node, ast.Assert) and _bounds_a_duration(node) and _OPT_OUT not in lines[node.lineno - 1]:
            yield Finding(path, node.lineno, "duration-asserted", ast.unparse(node.test)[:100])
        if (
            isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
            and node.name.startswith("test")
            and not _asserts(node)
        ):
            yield Finding(path, node.lineno, "no-assertion", node.name)


def test_files(roots: list[Path]) -> Iterator[Path]:
    for root in roots:
        if root.is_file():
            yield root
            continue
        yield from sorted(p for p in root.rglob("*.py") if p.name.startswith(("test_", "conftest")))


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    files = list(test_files([Path(a) for a in args] or [Path("tests")]))
    tests = 0
    findings: list[Finding] = []
    for path in files:
        text = path.read_text()
        tree = ast.parse(text, str(path))
        tests += sum(
            1
            for n in ast.walk(tree)
            if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name.startswith("test")
        )
        findings += check_tree(path, tree, text.splitlines())
    for finding in findings:
        print(finding)
    counts = {rule: sum(f.rule == rule for f in findings) for rule in _RULES}
    summary = ", ".join(f"{n} {rule}" for rule, n in counts.items())
    print(f"tests.checks: {tests} test functions in {len(files)} files: {summary}")
    return 1 if findings else 0


_RULES = ("no-assertion", "sleep-then-assert", "duration-asserted")

if __name__ == "__main__":
    sys.exit(main())
