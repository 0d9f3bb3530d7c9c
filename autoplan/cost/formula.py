"""A cost term's formula, declared once: an expression over named intermediates that the cost
model's own functions compute, rendered in general form (the derivation page, the column
dictionary) or with one layout's values substituted (``autoplan explain``).

``Formula.expression`` is arithmetic in Python syntax (``+ - * /``, ``max``, ``min``, ``clip``)
over the names of its ``Quantity``s; ``Formula.intermediates(ctx, batch, stage)`` returns those
quantities as arrays over the batch, from the functions the cost model evaluates the term with.
Evaluating the expression on them gives the term's column (``tests/unit/cost/test_formulas.py``
checks it over sampled layouts), so the text explain prints cannot drift from the code.
"""

from __future__ import annotations

import ast
import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

SYMBOLS = {ast.Add: "+", ast.Sub: "−", ast.Mult: "×", ast.Div: "/"}
PRECEDENCE = {ast.Add: 1, ast.Sub: 1, ast.Mult: 2, ast.Div: 2}
FUNCTIONS = {"max": np.maximum, "min": np.minimum, "clip": np.clip}


@dataclass(frozen=True)
class Quantity:
    """One named intermediate of a formula: its unit ('B', 'params', 'ranks', 's', '1', ...),
    what it is, and the code that computes it (``module.function`` or ``module.CONSTANT``)."""

    name: str
    unit: str
    meaning: str
    code: str


@dataclass(frozen=True)
class Constant:
    """A module constant a formula names: its value is read from ``module.attribute``; the
    meaning is written beside the constant's declaration here, once."""

    name: str
    module: str
    meaning: str

    @property
    def value(self) -> float:
        return float(getattr(importlib.import_module(f"autoplan.cost.{self.module}"), self.name))


@dataclass(frozen=True)
class Formula:
    """A term's formula: ``expression`` over ``quantities`` (see the module doc)."""

    expression: str
    quantities: tuple[Quantity, ...]
    intermediates: Callable[[Any, Any, str | None], dict[str, np.ndarray]]

    @property
    def tree(self) -> ast.expr:
        return ast.parse(self.expression, mode="eval").body

    def general(self) -> str:
        """The expression with its names, as a reader writes it (× for *, − for -)."""
        return _render(self.tree, None)[0]

    def evaluate(self, values: dict[str, np.ndarray]) -> np.ndarray:
        """The expression evaluated on ``values`` (arrays or scalars)."""
        return _evaluate(self.tree, values)

    def substituted(self, values: dict[str, float], texts: dict[str, str] | None = None) -> str:
        """The expression with one layout's values in place of the names (``texts[name]`` where
        given, e.g. with a unit); sums with a zero operand and factors of exactly 1 are left out
        (what does not apply to this layout)."""
        return _render(self.tree, values, texts=texts or {})[0]


def _evaluate(node: ast.expr, values: dict[str, Any]) -> Any:
    if isinstance(node, ast.Name):
        return values[node.id]
    if isinstance(node, ast.Constant):
        return float(node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_evaluate(node.operand, values)
    if isinstance(node, ast.BinOp):
        a, b = _evaluate(node.left, values), _evaluate(node.right, values)
        return {ast.Add: np.add, ast.Sub: np.subtract, ast.Mult: np.multiply, ast.Div: np.divide}[type(node.op)](a, b)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in FUNCTIONS:
        return FUNCTIONS[node.func.id](*(_evaluate(a, values) for a in node.args))
    raise ValueError(f"a formula holds + - * / max min clip over names and numbers, got {ast.dump(node)}")


def number(value: float) -> str:
    """A value as explain prints it: 4 significant digits, exponent form for large and small."""
    value = float(value)
    if value.is_integer() and abs(value) < 1e6:
        return str(int(value))
    if 1e-3 <= abs(value) < 1e4:
        return f"{value:.4g}"
    mantissa, exponent = f"{value:.3e}".split("e")
    return f"{mantissa.rstrip('0').rstrip('.')}e{int(exponent)}"


def _render(node: ast.expr, values: dict[str, float] | None, parent: int = 0,
            texts: dict[str, str] | None = None) -> tuple[str, float | None]:
    """(text, value) of ``node``; ``values`` None renders names, else the values in their place."""
    texts = texts or {}
    if isinstance(node, ast.Name):
        if values is None:
            return node.id, None
        return texts.get(node.id, number(values[node.id])), float(values[node.id])
    if isinstance(node, ast.Constant):
        return number(node.value), float(node.value)
    if isinstance(node, ast.UnaryOp):
        text, value = _render(node.operand, values, 3, texts)
        return f"−{text}", None if value is None else -value
    if isinstance(node, ast.Call):
        parts = [_render(a, values, 0, texts) for a in node.args]
        known = values is not None and all(v is not None for _, v in parts)
        value = float(FUNCTIONS[node.func.id](*(v for _, v in parts))) if known else None
        return f"{node.func.id}({', '.join(t for t, _ in parts)})", value
    level = PRECEDENCE[type(node.op)]
    left = _render(node.left, values, level, texts)
    right = _render(node.right, values, level + (1 if isinstance(node.op, (ast.Sub, ast.Div)) else 0), texts)
    value = None
    if values is not None:
        value = float(_evaluate(node, values))
        dropped = _drop(node.op, left[1], right[1])
        if dropped is not None:  # the kept operand, bracketed as it now stands in the parent
            return _render((node.left, node.right)[dropped], values, parent, texts)[0], value
    text = f"{left[0]} {SYMBOLS[type(node.op)]} {right[0]}"
    return (f"({text})" if level < parent else text), value


def _drop(op: ast.operator, left: float | None, right: float | None) -> int | None:
    """Which operand alone reads for the whole (0 the left, 1 the right), or None: x + 0, 0 + x,
    x − 0, x × 1, 1 × x, x / 1."""
    if isinstance(op, ast.Add):
        return 0 if right == 0 else 1 if left == 0 else None
    if isinstance(op, ast.Sub):
        return 0 if right == 0 else None
    if isinstance(op, ast.Mult):
        return 0 if right == 1 else 1 if left == 1 else None
    if isinstance(op, ast.Div):
        return 0 if right == 1 else None
    return None
