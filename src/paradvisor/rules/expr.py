"""A restricted expression language for rule conditions, parsed with `ast` and compiled to closures.

Allowed: numbers, strings, true/false, fact names from the vocabulary (dotted, like `plan.tp`:
the whole dotted name is looked up in the vocabulary — no attribute access is ever performed),
comparisons (== != < <= > >= in, not in), arithmetic (+ - * / // % **), and/or/not, `a if c else b`,
tuples/lists of constants (for `in`), and the whitelisted functions in FUNCTIONS.
Anything else — other attributes, dunder names, subscripts, lambdas, comprehensions, calls outside
the whitelist — is rejected at load time. Evaluation is bounded in time and size: expression length,
node count and depth are capped (no loops exist, so evaluation is linear in the node count), exponents
are small, numbers must stay finite, arithmetic takes numbers only (no string or tuple repetition or
%-formatting), and lists hold at most 32 items. Nothing is passed to eval/exec.
"""

from __future__ import annotations

import ast
import math
import operator
import warnings
from collections.abc import Callable

MAX_CHARS = 1000
MAX_NODES = 300
MAX_DEPTH = 24
MAX_EXPONENT = 64
MAX_MAGNITUDE = 1e300
MAX_INT = 10**300  # an integer's bound (a module constant: CPython does not fold a power this large)


class RuleExprError(ValueError):
    """A rule condition that is not valid in the language (message says why, col gives the column)."""

    def __init__(self, message: str, col: int | None = None):
        self.col = col
        super().__init__(message if col is None else f"{message} (column {col + 1})")


def _clamp(x, lo, hi):
    return max(lo, min(hi, x))


FUNCTIONS: dict[str, tuple[Callable, int, int]] = {
    # name: (function, min args, max args)
    "min": (min, 2, 8),
    "max": (max, 2, 8),
    "abs": (abs, 1, 1),
    "log2": (lambda x: math.log2(x) if x > 0 else float("-inf"), 1, 1),
    "sqrt": (lambda x: math.sqrt(x) if x >= 0 else float("nan"), 1, 1),
    "ceil": (math.ceil, 1, 1),
    "floor": (math.floor, 1, 1),
    "round": (round, 1, 2),
    "clamp": (_clamp, 3, 3),
}

_BIN = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_CMP = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.In: lambda a, b: a in b,
    ast.NotIn: lambda a, b: a not in b,
}
_CONST_NAMES = {"true": True, "false": False, "True": True, "False": False}


def _dotted(node) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


def _constant(node) -> bool:
    return not any(
        isinstance(n, (ast.Name, ast.Attribute)) and _dotted(n) not in _CONST_NAMES for n in ast.walk(node)
    )


def _num(x):
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return x
    if isinstance(x, float) and (math.isnan(x) or abs(x) > MAX_MAGNITUDE):
        raise ArithmeticError("number out of range")
    if isinstance(x, int) and abs(x) > MAX_INT:
        raise ArithmeticError("number out of range")
    return x


def _operand(x):
    """Arithmetic is on numbers only: `'a' * 10**9` or `'%999999999d' % 1` would build huge objects."""
    if isinstance(x, (int, float)):  # bool is an int
        return x
    raise TypeError(f"arithmetic needs numbers, not {type(x).__name__}")


class Compiled:
    """A checked expression: `.names` are the facts it reads, `(facts)` evaluates it."""

    def __init__(
        self, text: str, fn: Callable[[dict], object], names: set[str], strings: list[tuple[str, str]]
    ):
        self.text = text
        self._fn = fn
        self.names = names
        self.compared_strings = strings  # (fact, literal) pairs from `fact == "literal"` comparisons

    def __call__(self, facts: dict):
        return self._fn(facts)


def _parse(text: str) -> ast.Expression:
    """The checks before any node is built: size, dunders, syntax, node count."""
    if not isinstance(text, str) or not text.strip():
        raise RuleExprError("empty condition")
    if len(text) > MAX_CHARS:
        raise RuleExprError(f"condition longer than {MAX_CHARS} characters")
    if "__" in text:
        raise RuleExprError("names with '__' are not allowed")
    try:
        with warnings.catch_warnings():  # invalid escapes in a string literal: not worth a warning line
            warnings.simplefilter("ignore")
            tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as exc:
        raise RuleExprError(f"syntax error: {exc.msg}", (exc.offset or 1) - 1) from None
    except (RecursionError, MemoryError, ValueError):
        raise RuleExprError("expression too deeply nested") from None
    count = sum(1 for _ in ast.walk(tree))
    if count > MAX_NODES:
        raise RuleExprError(f"expression too large ({count} nodes, at most {MAX_NODES})")
    return tree


def _power(left: Callable, right: Callable) -> Callable[[dict], object]:
    def power(f):
        b, e = _operand(left(f)), _operand(right(f))
        if isinstance(e, (int, float)) and abs(e) > MAX_EXPONENT:
            raise ArithmeticError("exponent too large")
        if isinstance(b, (int, float)) and abs(b) > 1e12:
            raise ArithmeticError("base too large for a power")
        return _num(b**e)

    return power


def _chain(left: Callable, ops: list, rights: list) -> Callable[[dict], object]:
    def compare(f):
        a = left(f)
        for op, r in zip(ops, rights):
            b = r(f)
            if not op(a, b):
                return False
            a = b
        return True

    return compare


class _Builder:
    """Turns checked `ast` nodes into closures, one method per node kind; collects the facts read
    (`names`) and the `fact == "literal"` pairs (`strings`)."""

    def __init__(self, vocabulary: dict[str, str]):
        self.vocabulary = vocabulary
        self.names: set[str] = set()
        self.strings: list[tuple[str, str]] = []
        self._kinds = [
            (ast.Expression, self._expression),
            (ast.Constant, self._const),
            ((ast.Name, ast.Attribute), self._name),
            ((ast.Tuple, ast.List), self._sequence),
            (ast.BoolOp, self._boolop),
            (ast.UnaryOp, self._unary),
            (ast.BinOp, self._binop),
            (ast.Compare, self._compare),
            (ast.IfExp, self._ifexp),
            (ast.Call, self._call),
        ]

    def build(self, node, depth: int) -> Callable[[dict], object]:
        col = getattr(node, "col_offset", None)
        if depth > MAX_DEPTH:
            raise RuleExprError(f"expression nested deeper than {MAX_DEPTH}", col)
        for kind, method in self._kinds:
            if isinstance(node, kind):
                return method(node, depth, col)
        raise RuleExprError(f"{type(node).__name__} is not allowed in a rule condition", col)

    def _expression(self, node, depth, col):
        return self.build(node.body, depth + 1)

    def _const(self, node, depth, col):
        v = node.value
        if not (isinstance(v, bool) or isinstance(v, (int, float, str))):
            raise RuleExprError(f"constant {v!r} is not allowed", col)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            try:
                _num(v)
            except ArithmeticError:
                raise RuleExprError(f"number out of range: {str(v)[:20]}", col) from None
        if isinstance(v, str) and len(v) > MAX_CHARS:
            raise RuleExprError("string constant too long", col)
        return lambda f, v=v: v

    def _name(self, node, depth, col):
        name = _dotted(node)
        if name is None:
            raise RuleExprError("attribute access is not allowed", col)
        if name in _CONST_NAMES:
            return lambda f, v=_CONST_NAMES[name]: v
        if name in FUNCTIONS:
            raise RuleExprError(f"function {name!r} must be called", col)
        if name not in self.vocabulary:
            raise RuleExprError(f"unknown fact {name!r}", col)
        self.names.add(name)
        return lambda f, n=name: f[n]

    def _sequence(self, node, depth, col):
        items = [self.build(e, depth + 1) for e in node.elts]
        if len(items) > 32:
            raise RuleExprError("list longer than 32", col)
        return lambda f, items=items: tuple(i(f) for i in items)

    def _boolop(self, node, depth, col):
        parts = [self.build(v, depth + 1) for v in node.values]
        if isinstance(node.op, ast.And):
            return lambda f, parts=parts: all(bool(p(f)) for p in parts)
        return lambda f, parts=parts: any(bool(p(f)) for p in parts)

    def _unary(self, node, depth, col):
        inner = self.build(node.operand, depth + 1)
        if isinstance(node.op, ast.Not):
            return lambda f: not inner(f)
        if isinstance(node.op, ast.USub):
            return lambda f: _num(-inner(f))
        if isinstance(node.op, ast.UAdd):
            return lambda f: _num(+inner(f))
        raise RuleExprError("operator not allowed", col)

    def _binop(self, node, depth, col):
        op = _BIN.get(type(node.op))
        if op is None:
            raise RuleExprError(f"operator {type(node.op).__name__} not allowed", col)
        for side in (node.left, node.right):
            kind = self.vocabulary.get(_dotted(side) or "", "num")
            if (
                (isinstance(side, ast.Constant) and isinstance(side.value, str))
                or isinstance(side, (ast.Tuple, ast.List))
                or kind not in ("num", "bool")
            ):
                raise RuleExprError("arithmetic is on numbers only (not on strings or lists)", col)
        left, right = self.build(node.left, depth + 1), self.build(node.right, depth + 1)
        if not isinstance(node.op, ast.Pow):
            return lambda f, op=op, left=left, right=right: _num(op(_operand(left(f)), _operand(right(f))))
        if _constant(node.right):
            try:
                e = right({})
            except (ArithmeticError, TypeError, ValueError):
                raise RuleExprError("exponent out of range", col) from None
            if isinstance(e, (int, float)) and abs(e) > MAX_EXPONENT:
                raise RuleExprError(f"exponent larger than {MAX_EXPONENT}", col)
        return _power(left, right)

    def _compare(self, node, depth, col):
        left = self.build(node.left, depth + 1)
        ops = [_CMP.get(type(o)) for o in node.ops]
        if any(o is None for o in ops):
            raise RuleExprError("comparison not allowed (use == != < <= > >= in, not in)", col)
        rights = [self.build(c, depth + 1) for c in node.comparators]
        lhs_name = _dotted(node.left)
        for c in node.comparators:
            if lhs_name in self.vocabulary and isinstance(c, ast.Constant) and isinstance(c.value, str):
                self.strings.append((lhs_name, c.value))
            if lhs_name in self.vocabulary and isinstance(c, (ast.Tuple, ast.List)):
                self.strings.extend(
                    (lhs_name, e.value)
                    for e in c.elts
                    if isinstance(e, ast.Constant) and isinstance(e.value, str)
                )
        return _chain(left, ops, rights)

    def _ifexp(self, node, depth, col):
        t = self.build(node.test, depth + 1)
        c, e = self.build(node.body, depth + 1), self.build(node.orelse, depth + 1)
        return lambda f: c(f) if t(f) else e(f)

    def _call(self, node, depth, col):
        fname = node.func.id if isinstance(node.func, ast.Name) else None
        if fname not in FUNCTIONS or node.keywords:
            raise RuleExprError(
                f"call of {(_dotted(node.func) or 'an expression')!r} is not allowed "
                f"(functions: {', '.join(FUNCTIONS)})",
                col,
            )
        fn, lo, hi = FUNCTIONS[fname]
        if not lo <= len(node.args) <= hi or any(isinstance(a, ast.Starred) for a in node.args):
            raise RuleExprError(f"{fname}() takes {lo}..{hi} arguments", col)
        args = [self.build(a, depth + 1) for a in node.args]
        return lambda f, fn=fn, args=args: _num(fn(*(a(f) for a in args)))


def compile_expr(text: str, vocabulary: dict[str, str]) -> Compiled:
    """Parse and check `text` against `vocabulary` (fact name -> type). Raises RuleExprError."""
    tree = _parse(text)
    builder = _Builder(vocabulary)
    fn = builder.build(tree, 0)
    if not builder.names:  # a constant condition: evaluate it now so that errors surface at load time
        try:
            fn({})
        except (ArithmeticError, TypeError, ValueError) as exc:
            raise RuleExprError(f"cannot be evaluated: {exc}") from None
    return Compiled(text, fn, builder.names, builder.strings)
