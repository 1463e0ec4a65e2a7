"""The track constants of a night's prepare.py, read from its source and never run.

A checkout is a stranger's: its prepare.py may set a constant to `10 ** 10 ** 8`, which Python would spend
minutes and gigabytes computing. Only numbers and + - * / // ** are evaluated, every intermediate value must
stay within 2**63 and every exponent within 64, and an expression may have at most MAX_NODES nodes, so the
work is bounded by the size of the expression whatever it holds.
"""

from __future__ import annotations

import ast
import operator
from dataclasses import dataclass

# prepare.py's name for each constant -> the key of trainer/prepare.py's TRACKS
CONSTANTS = {"MAX_SEQ_LEN": "max_seq_len", "TIME_BUDGET": "time_budget", "EVAL_TOKENS": "eval_tokens",
             "VOCAB_SIZE": "vocab_size"}
OPERATORS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv,
             ast.Div: operator.truediv, ast.Pow: operator.pow}
LIMIT = 2 ** 63
MAX_EXPONENT = 64
MAX_NODES = 64
MAX_SOURCE_BYTES = 2 * 1024 * 1024


@dataclass(frozen=True)
class Constant:
    name: str            # as prepare.py names it (EVAL_TOKENS)
    words: str           # its right-hand side as written there (40 * 524288)
    value: int | float

    def said(self) -> str:
        """`EVAL_TOKENS = 40 * 524288 (20971520)`: prepare.py's words and the exact number."""
        exact = f"{self.value:d}" if isinstance(self.value, int) else f"{self.value:g}"
        return f"{self.name} = {self.words}" + (f" ({exact})" if exact != self.words else "")


def read_constants(source: str, where: str) -> tuple[dict[str, Constant], list[str]]:
    """The constants by TRACKS key, and the problems found (each a phrase naming the constant)."""
    if len(source) > MAX_SOURCE_BYTES:
        return {}, [f"{where} is {len(source):,} characters, not a prepare.py"]
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return {}, [f"{where} does not parse as Python"]
    found, problems = {}, []
    for node in tree.body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                and (name := node.targets[0].id) in CONSTANTS):
            words = " ".join((ast.get_source_segment(source, node.value) or "?").split())[:80]
            try:
                if sum(1 for _ in ast.walk(node.value)) > MAX_NODES:
                    raise ValueError(f"an expression of more than {MAX_NODES} parts; this import reads short "
                                     "arithmetic only")
                value = _value(node.value)
                if value <= 0 or value != int(value):
                    raise ValueError(f"which is {value:g}, not a positive whole number")
                found[CONSTANTS[name]] = Constant(name, words, int(value))
            except ValueError as err:
                problems.append(f"{where} sets {name} = {words}, {err}")
    if missing := [name for name, key in CONSTANTS.items() if key not in found and
                   not any(problem.startswith(f"{where} sets {name} ") for problem in problems)]:
        problems.append(f"{where} does not set {', '.join(missing)}: it is not the reference's prepare.py, so the "
                        "night's constants are unknown")
    return found, problems


def _value(node: ast.expr) -> int | float:
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float) and not isinstance(node.value, bool):
        return _checked(node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        value = _value(node.operand)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp) and type(node.op) in OPERATORS:
        left, right = _value(node.left), _value(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) > MAX_EXPONENT:
            raise ValueError(f"an exponent above {MAX_EXPONENT}; this import reads plain numbers only")
        try:
            return _checked(OPERATORS[type(node.op)](left, right))
        except (ZeroDivisionError, OverflowError):
            raise ValueError("arithmetic that has no number as its result") from None
    raise ValueError("not a plain number; this import reads numbers and arithmetic only")


def _checked(value) -> int | float:
    if isinstance(value, complex) or not -LIMIT <= value <= LIMIT:
        raise ValueError("a number beyond 2**63; this import reads plain numbers only")
    return value
