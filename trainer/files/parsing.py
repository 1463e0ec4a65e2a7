"""Parsing Python source where several threads may parse at once.

CPython 3.11 keeps the AST constructor's recursion depth in state the threads share, so two threads
parsing at the same moment can fail with "AST constructor recursion depth mismatch" (SystemError).
The loop judges several experiments in threads of their own; every parse goes through here, one at
a time."""

from __future__ import annotations

import ast
import threading

_ONE_AT_A_TIME = threading.Lock()


def parse(source: str, mode: str = "exec") -> ast.AST:
    with _ONE_AT_A_TIME:
        return ast.parse(source, mode=mode)


def literal_eval(text: str):
    return ast.literal_eval(parse(text.lstrip(" \t"), mode="eval"))
