"""Whether a change is a new hyperparameter value or new code, read from train.py before and after it.

A change is `hyperparameter` when the two modules are equal once the values of their top-level UPPER_CASE
assignments are masked out: it only set values (of the hyperparameter block or any other UPPER_CASE constant).
Anything else is `algorithmic`, a new UPPER_CASE constant included (the module gains a statement). A value is
masked only when it is a plain value (numbers, strings, other constants' names, arithmetic, tuples and lists of
them): a constant set to a call or a lambda is code, and changing it is algorithmic.
"""

from __future__ import annotations

import ast
import re
from typing import Literal

from trainer.files import parsing

Novelty = Literal["hyperparameter", "algorithmic"]
HYPERPARAMETER: Novelty = "hyperparameter"
ALGORITHMIC: Novelty = "algorithmic"
NOVELTIES: tuple[Novelty, ...] = (HYPERPARAMETER, ALGORITHMIC)

UPPER_CASE = re.compile(r"^[A-Z][A-Z0-9_]*$")
PLAIN = (ast.Constant, ast.Name, ast.Load, ast.UnaryOp, ast.BinOp, ast.Tuple, ast.List, ast.unaryop,
         ast.operator)


def novelty(parent_source: str, source: str) -> Novelty:
    """The kind of the change from parent_source to source; a source that does not parse counts as new code."""
    try:
        before, after = _settings_and_code(parent_source), _settings_and_code(source)
    except (SyntaxError, ValueError):
        return ALGORITHMIC
    return HYPERPARAMETER if before[1] == after[1] else ALGORITHMIC


def changed_settings(parent_source: str, source: str) -> list[str]:
    """The UPPER_CASE constants whose plain value differs between the two sources, in the order of source."""
    try:
        before, after = _settings_and_code(parent_source)[0], _settings_and_code(source)[0]
    except (SyntaxError, ValueError):
        return []
    return [name for name, value in after.items() if before.get(name, value) != value]


def _settings_and_code(source: str) -> tuple[dict[str, str], str]:
    """The plain values of the top-level UPPER_CASE assignments (name -> dumped value), and the module with
    those values masked (dumped without positions, so layout and comments do not count)."""
    module = parsing.parse(source)
    settings: dict[str, str] = {}
    for node in module.body:
        names = _upper_case_targets(node)
        if names and node.value is not None and all(isinstance(part, PLAIN) for part in ast.walk(node.value)):
            for name in names:
                settings[name] = ast.dump(node.value)
            node.value = ast.Constant(value=Ellipsis)
    return settings, ast.dump(module)


def _upper_case_targets(node: ast.stmt) -> list[str]:
    targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) \
        else []
    return [t.id for t in targets] if targets and all(isinstance(t, ast.Name) and UPPER_CASE.match(t.id)
                                                      for t in targets) else []
