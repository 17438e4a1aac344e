"""Composition expressions: compose library signatures along a written term.

Two notations, freely mixed::

    seq(prefix, par(compute, allreduce))           function form
    prefix ⊗ (compute ⊕ allreduce)                 operator form (the paper's symbols)
    prefix >> (compute | allreduce)                ASCII operator form

=============  ==========================  ===============================
operator       symbols                     function
=============  ==========================  ===============================
sequential     ``⊗``  ``>>``  ``*``        ``seq(a, b, …)``
same device    ``⊕``  ``|``                ``par(a, b, …)``
cross device   ``⊕multi``  ``||``          ``par_multi(a, b, …)``
idle element                               ``idle(duration, power)``
=============  ==========================  ===============================

Operators of one kind chain (``a ⊗ b ⊗ c``); different kinds at one level need
parentheses (``a ⊗ (b ⊕ c)``), because the paper gives them no precedence and a silent
choice would change the energy. ``idle(2ms, 60W)`` is an idle element (units: s, ms, us,
ns; W, mW, kW).

Element names may contain letters, digits and ``_ . - : / @``; other names go in quotes
(``"my kernel"``). A selector picks one signature when a name has several (one per κ, ω):
``gemm[impl=cutlass,sm_clock_mhz=1200]``. Keys: ``impl``, ``device``, ``sm_clock_mhz``,
``mem_clock_mhz``, ``power_limit_w``, and any key of the op point's extras or of the
workload. Errors quote the expression with a caret under the offending place.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from eopt.calculus.operators import (
    CompositionError,
    _idle_draw,
    idle,
    max_moments,
    max_probabilities,
    par,
    par_multi,
    seq,
)
from eopt.calculus.uncertainty import DEFAULT_CONFIDENCE, BiasBound, accumulated_bias
from eopt.model.library import Library
from eopt.model.signature import Signature
from eopt.model.units import parse_power_w, parse_time_s

__all__ = [
    "Expr",
    "ExpressionError",
    "compose_expression",
    "evaluate",
    "expression_bias",
    "parse_element_ref",
    "parse_expression",
    "resolve_element",
    "selector_for",
]

FUNCTIONS = ("seq", "par", "par_multi", "idle")
_OPERATORS = (  # longest first, so "⊕multi" wins over "⊕" and "||" over "|"
    ("⊕multi", "par_multi"),
    ("||", "par_multi"),
    ("⊗", "seq"),
    (">>", "seq"),
    ("*", "seq"),
    ("⊕", "par"),
    ("|", "par"),
)
_SYMBOL = {"seq": "⊗", "par": "⊕", "par_multi": "⊕multi"}
_WORD = re.compile(r"[\w.\-:/@]+")
_OP_POINT_KEYS = ("sm_clock_mhz", "mem_clock_mhz", "power_limit_w")


class ExpressionError(ValueError):
    """An expression that cannot be parsed or composed; the message points at the place.

    Attributes:
        expression: The full expression text.
        position: Column (0-based) where the problem starts.
        end: Column just after it.
        reason: The message without the quoted expression.
    """

    def __init__(self, reason: str, expression: str, position: int, end: int | None = None):
        self.reason = reason
        self.expression = expression
        self.position = max(0, min(position, len(expression)))
        self.end = max(self.position + 1, end if end is not None else self.position + 1)
        caret = " " * self.position + "^" * max(1, min(self.end, len(expression)) - self.position)
        super().__init__(f"{reason} (at column {self.position + 1})\n  {expression}\n  {caret}")


# Syntax tree ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Expr:
    """A node of a parsed expression.

    Attributes:
        kind: ``"name"``, ``"seq"``, ``"par"``, ``"par_multi"`` or ``"idle"``.
        start: First column of the node in the text.
        end: Column just after the node.
        name: The element name (``kind == "name"``).
        selector: ``key → value`` pairs of the name's selector.
        children: Operands (operators).
        args: ``(duration s, power W)`` of an idle element.
    """

    kind: str
    start: int
    end: int
    name: str = ""
    selector: tuple[tuple[str, str], ...] = ()
    children: tuple[Expr, ...] = ()
    args: tuple[float, ...] = field(default=())

    def leaves(self) -> list[Expr]:
        """The element references, left to right."""
        if self.kind == "name":
            return [self]
        return [leaf for child in self.children for leaf in child.leaves()]


@dataclass(frozen=True)
class _Token:
    kind: str  # word, string, op, "(", ")", "[", "]", ",", "=", end
    text: str
    start: int
    end: int
    value: str = ""


def _tokenize(text: str) -> list[_Token]:
    tokens: list[_Token] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch.isspace():
            i += 1
            continue
        op = next(((sym, kind) for sym, kind in _OPERATORS if text.startswith(sym, i)), None)
        if op is not None:
            tokens.append(_Token("op", op[0], i, i + len(op[0]), op[1]))
            i += len(op[0])
        elif ch in "()[],=":
            tokens.append(_Token(ch, ch, i, i + 1))
            i += 1
        elif ch in "\"'":
            close = text.find(ch, i + 1)
            if close < 0:
                raise ExpressionError(f"unclosed quote {ch}", text, i, len(text))
            tokens.append(_Token("string", text[i : close + 1], i, close + 1, text[i + 1 : close]))
            i = close + 1
        else:
            match = _WORD.match(text, i)
            if match is None:
                raise ExpressionError(
                    f"unexpected character {ch!r}; names use letters, digits and _ . - : / @ "
                    "(quote other names)",
                    text,
                    i,
                )
            tokens.append(_Token("word", match.group(), i, match.end(), match.group()))
            i = match.end()
    tokens.append(_Token("end", "", len(text), len(text)))
    return tokens


#: The deepest nesting of parentheses and calls an expression may have: far beyond any
#: schedule written by hand, and well inside Python's recursion limit.
MAX_NESTING = 100


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = _tokenize(text)
        self.i = 0
        self.depth = 0

    def deeper(self, tok: _Token) -> None:
        """Enter one more level of nesting at ``tok``; refuse past :data:`MAX_NESTING`."""
        self.depth += 1
        if self.depth > MAX_NESTING:
            raise self.error(
                f"nested more than {MAX_NESTING} levels deep; compose a long schedule from a "
                "placements file (--schedule) instead",
                tok,
            )

    @property
    def tok(self) -> _Token:
        return self.tokens[self.i]

    def error(self, reason: str, tok: _Token | None = None) -> ExpressionError:
        t = tok or self.tok
        return ExpressionError(reason, self.text, t.start, t.end)

    def expect(self, kind: str, what: str) -> _Token:
        if self.tok.kind != kind:
            found = "the end" if self.tok.kind == "end" else repr(self.tok.text)
            raise self.error(f"expected {what}, found {found}")
        tok = self.tok
        self.i += 1
        return tok

    def parse(self) -> Expr:
        if self.tok.kind == "end":
            raise self.error("empty expression; write e.g. seq(a, par(b, c))")
        node = self.chain()
        if self.tok.kind != "end":
            raise self.error(f"unexpected {self.tok.text!r} after a complete expression")
        return node

    def chain(self) -> Expr:
        """operand (op operand)* with one operator kind per level."""
        first = self.operand()
        items = [first]
        kind: str | None = None
        while self.tok.kind == "op":
            op = self.tok
            if kind is not None and op.value != kind:
                raise self.error(
                    f"{op.text!r} after {_SYMBOL[kind]!r} at one level is ambiguous; add "
                    f"parentheses, e.g. (a {_SYMBOL[kind]} b) {_SYMBOL[op.value]} c",
                    op,
                )
            kind = op.value
            self.i += 1
            if self.tok.kind in ("end", ")", ","):
                raise self.error(f"{op.text!r} needs an operand after it", op)
            items.append(self.operand())
        if kind is None:
            return first
        return Expr(kind, first.start, items[-1].end, children=tuple(items))

    def operand(self) -> Expr:
        tok = self.tok
        if tok.kind == "(":
            self.deeper(tok)
            self.i += 1
            if self.tok.kind == ")":
                raise self.error("empty parentheses")
            inner = self.chain()
            close = self.expect(")", f"')' to close the '(' at column {tok.start + 1}")
            self.depth -= 1
            return _respan(inner, tok.start, close.end)
        if tok.kind == "word" and tok.value in FUNCTIONS and self.tokens[self.i + 1].kind == "(":
            return self.call()
        if tok.kind in ("word", "string"):
            self.i += 1
            if not tok.value:
                raise self.error("empty element name", tok)
            selector: tuple[tuple[str, str], ...] = ()
            end = tok.end
            if self.tok.kind == "[":
                selector, end = self.selector()
            return Expr("name", tok.start, end, name=tok.value, selector=selector)
        if tok.kind == "end":
            raise self.error("expression ends where an element name or '(' is expected")
        raise self.error(f"expected an element name, a function or '(', found {tok.text!r}")

    def selector(self) -> tuple[tuple[tuple[str, str], ...], int]:
        self.expect("[", "'['")
        pairs: list[tuple[str, str]] = []
        seen: set[str] = set()
        while True:
            key = self.tok
            if key.kind != "word":
                raise self.error("expected a selector key such as impl or sm_clock_mhz")
            self.i += 1
            self.expect("=", f"'=' after selector key {key.text!r}")
            value = self.tok
            if value.kind not in ("word", "string"):
                raise self.error(f"expected a value for selector key {key.text!r}")
            self.i += 1
            if key.value in seen:
                raise self.error(f"selector key {key.text!r} given twice", key)
            seen.add(key.value)
            pairs.append((key.value, value.value))
            if self.tok.kind == ",":
                self.i += 1
                continue
            close = self.expect("]", "',' or ']' in the selector")
            return tuple(pairs), close.end

    def call(self) -> Expr:
        func = self.tok
        self.deeper(func)
        self.i += 2  # name and "("
        if self.tok.kind == ")":
            raise self.error(f"{func.value}() needs at least one argument")
        if func.value == "idle":
            return self.idle_call(func)
        children = [self.chain()]
        while self.tok.kind == ",":
            self.i += 1
            children.append(self.chain())
        close = self.expect(")", f"',' or ')' in {func.value}(…)")
        self.depth -= 1
        return Expr(func.value, func.start, close.end, children=tuple(children))

    def idle_call(self, func: _Token) -> Expr:
        raw: list[_Token] = []
        while True:
            tok = self.tok
            if tok.kind not in ("word", "string"):
                raise self.error("idle takes a duration and a static power, e.g. idle(2ms, 60W)")
            raw.append(tok)
            self.i += 1
            if self.tok.kind == ",":
                self.i += 1
                continue
            close = self.expect(")", "',' or ')' in idle(…)")
            self.depth -= 1
            break
        if len(raw) != 2:
            raise ExpressionError(
                "idle takes a duration and a static power, e.g. idle(2ms, 60W)",
                self.text,
                func.start,
                close.end,
            )
        try:
            duration = parse_time_s(raw[0].value, "idle duration")
        except ValueError as exc:
            raise self.error(str(exc), raw[0]) from None
        try:
            power = parse_power_w(raw[1].value, "idle power")
        except ValueError as exc:
            raise self.error(str(exc), raw[1]) from None
        return Expr("idle", func.start, close.end, args=(duration, power))


def _respan(node: Expr, start: int, end: int) -> Expr:
    """The node with its span widened to include surrounding parentheses."""
    return Expr(node.kind, start, end, node.name, node.selector, node.children, node.args)


def parse_expression(text: str) -> Expr:
    """Parse a composition expression into a syntax tree.

    Raises:
        ExpressionError: with the expression and a caret at the problem.

    Example:
        >>> parse_expression("a ⊗ (b | c)").kind
        'seq'
    """
    if not isinstance(text, str):
        raise TypeError(f"expression must be a string, got {type(text).__name__}")
    return _Parser(text).parse()


# Resolving names --------------------------------------------------------------------------
def _numbers_equal(a: Any, b: str) -> bool | None:
    """Numeric comparison when both sides read as numbers, else None."""
    try:
        x = float(a)
        y = float(b)
    except (TypeError, ValueError):
        return None
    return math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-12)


def _selector_values(sig: Signature, key: str) -> list[Any] | None:
    """The values a signature has for a selector key (None: the key does not apply)."""
    if key == "impl":
        return [sig.impl]
    if key == "device":
        return list(sig.devices)
    if key in _OP_POINT_KEYS:
        value = getattr(sig.op_point, key)
        return None if value is None else [value]
    if key in sig.op_point.extras:
        return [sig.op_point.extras[key]]
    if key in sig.workload:
        return [sig.workload[key]]
    return None


def _matches(sig: Signature, key: str, wanted: str) -> bool:
    values = _selector_values(sig, key)
    if values is None:
        return False
    for v in values:
        same = _numbers_equal(v, wanted)
        if same if same is not None else str(v) == wanted:
            return True
    return False


def selector_for(sig: Signature, among: Sequence[Signature]) -> str:
    """A reference such as ``gemm[impl=cutlass,sm_clock_mhz=1200]`` that tells ``sig``
    apart from the other signatures of the same name in ``among``."""
    keys: list[str] = []
    candidates = ["impl", *_OP_POINT_KEYS, "device"]
    candidates += sorted({k for s in among for k in s.op_point.extras})
    candidates += sorted({k for s in among for k in s.workload})
    for key in dict.fromkeys(candidates):
        distinct = {repr(_selector_values(s, key)) for s in among}
        if len(distinct) > 1 and _selector_values(sig, key) is not None:
            keys.append(key)
    parts = []
    for key in keys:
        values = _selector_values(sig, key) or []
        shown: Any = values[0] if len(values) == 1 else ",".join(map(str, values))
        if isinstance(shown, float) and shown.is_integer():
            shown = int(shown)
        parts.append(f"{key}={shown}")
    name = sig.name if _WORD.fullmatch(sig.name) else f'"{sig.name}"'
    return f"{name}[{','.join(parts)}]" if parts else name


def _signatures(library: Iterable[Signature]) -> list[Signature]:
    return list(library.signatures) if isinstance(library, Library) else list(library)


def _resolve(
    name: str,
    selector: Sequence[tuple[str, str]],
    sigs: Sequence[Signature],
    device: str | None = None,
) -> Signature:
    """One signature for ``name[selector]``; raises ValueError with the choices."""
    found = [s for s in sigs if s.name == name]
    if not found:
        names = list(dict.fromkeys(s.name for s in sigs))
        close = difflib.get_close_matches(name, names, n=3)
        hint = f"; did you mean {', '.join(map(repr, close))}?" if close else ""
        shown = ", ".join(names[:20]) + (" …" if len(names) > 20 else "")
        raise ValueError(f"no element named {name!r} in the library{hint} (known: {shown})")
    chosen = found
    for key, wanted in selector:
        if all(_selector_values(s, key) is None for s in found):
            keys = ["impl", "device", *_OP_POINT_KEYS]
            keys += sorted({k for s in found for k in (*s.op_point.extras, *s.workload)})
            raise ValueError(
                f"selector key {key!r} does not apply to {name!r}; use one of "
                f"{', '.join(dict.fromkeys(keys))}"
            )
        chosen = [s for s in chosen if _matches(s, key, wanted)]
    if device is not None and len(chosen) > 1:
        # A placement's device narrows the choice when signatures are per device.
        on_device = [s for s in chosen if device in s.devices]
        chosen = on_device or chosen
    if len(chosen) > 1:
        # A bare name means the element's context-independent values (paper §4.3); its
        # characterized variants are for composition with an interaction graph.
        chosen = [s for s in chosen if s.context is None] or chosen
    distinct = list({repr(s.to_dict()): s for s in chosen}.values())
    if len(distinct) == 1:
        return distinct[0]
    if not distinct:
        choices = "; ".join(selector_for(s, found) for s in found[:12])
        raise ValueError(f"no signature of {name!r} matches the selector; choices: {choices}")
    choices = "; ".join(selector_for(s, found) for s in distinct[:12])
    more = f" (and {len(distinct) - 12} more)" if len(distinct) > 12 else ""
    raise ValueError(
        f"{name!r} matches {len(distinct)} signatures; pick one with a selector: {choices}{more}"
    )


def parse_element_ref(ref: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    """Split ``gemm[impl=cutlass]`` into ``("gemm", (("impl", "cutlass"),))``.

    Raises:
        ExpressionError: when ``ref`` is not a single element reference.
    """
    node = parse_expression(ref)
    if node.kind != "name":
        raise ExpressionError("expected one element name (with an optional selector)", ref, 0)
    return node.name, node.selector


def resolve_element(ref: str, library: Iterable[Signature], device: str | None = None) -> Signature:
    """The one signature that an element reference such as ``gemm[impl=cutlass]`` names.

    Args:
        ref: Element name with an optional selector.
        library: A :class:`~eopt.model.library.Library` or signatures.
        device: When several signatures remain, prefer those on this device.

    Raises:
        ExpressionError: for a malformed reference.
        ValueError: when no signature or several match, listing the choices.
    """
    name, selector = parse_element_ref(ref)
    return _resolve(name, selector, _signatures(library), device)


# Evaluation -------------------------------------------------------------------------------
def evaluate(
    expr: Expr,
    library: Iterable[Signature],
    text: str = "",
    idle_power: float | Mapping[str, float] | None = None,
    time_mean: str = "max_of_means",
) -> Signature:
    """Compose the signatures a parsed expression names.

    Args:
        expr: From :func:`parse_expression`.
        library: A :class:`~eopt.model.library.Library` or signatures.
        text: The expression's text, for error messages.
        idle_power: Passed to ``par_multi`` for padding shorter operands.
        time_mean: The makespans of ⊕ and ⊕multi: ``"max_of_means"`` (default, the
            paper's convention) or ``"expected_max"`` (the mean a measurement tends to).

    Raises:
        ExpressionError: for unknown or ambiguous names and operands that cannot be
            composed, pointing at the node.
    """
    sigs = _signatures(library)

    def walk(node: Expr) -> Signature:
        try:
            if node.kind == "name":
                return _resolve(node.name, node.selector, sigs)
            if node.kind == "idle":
                return idle(node.args[0], node.args[1])
            operands = [walk(child) for child in node.children]
            if node.kind == "seq":
                return seq(operands)
            if node.kind == "par":
                return par(operands, time_mean=time_mean)
            return par_multi(operands, idle_power=idle_power, time_mean=time_mean)
        except ExpressionError:
            raise
        except (CompositionError, ValueError) as exc:
            raise ExpressionError(str(exc), text, node.start, node.end) from None

    return walk(expr)


def compose_expression(
    text: str,
    library: Iterable[Signature],
    idle_power: float | Mapping[str, float] | None = None,
    time_mean: str = "max_of_means",
) -> Signature:
    """Parse and evaluate an expression over a library (see :func:`evaluate`).

    Example:
        >>> from eopt.calculus import Signature
        >>> lib = [Signature("a", 60.0, 1e-3, 0.1), Signature("b", 60.0, 2e-3, 0.2)]
        >>> round(compose_expression("a ⊗ b", lib).energy, 6)
        0.48
    """
    return evaluate(parse_expression(text), library, text, idle_power, time_mean)


def expression_bias(
    expr: Expr,
    library: Iterable[Signature],
    confidence: float = DEFAULT_CONFIDENCE,
    starts_at_null: bool = True,
    idle_power: float | Mapping[str, float] | None = None,
) -> BiasBound:
    """Worst-case reduction bias of composing ``expr`` context-independently (App. D).

    Each element carries the Eq. (13) tolerances of the substitutions it needs: one for
    the entry-state substitution unless it starts together with a composition that starts
    at the null context, and one for the isolation substitution when it co-runs (sits
    under a ⊕ or ⊕multi). A chain from the null context gives Eq. (36); a ⊕ pair inside a
    chain gives m = 2 each, as in Eq. (13). Multipliers add over elements; they do not
    compound over levels. Idle elements written with ``idle(…)`` have a schedule-set
    duration and no dynamic energy; they are not counted. Under ⊕multi, the idle padding
    adds App. D's terms (as :func:`eopt.calculus.schedule.idle_windows` for a schedule):
    the elements of an operand that can set the makespan scale their tolerances by
    1 + π·P′/s (P′ the other operands' idle draw, ``idle_power`` as for ``par_multi``),
    and each operand's padding carries two tolerances of σ_Eι = p·√Var(M − T).
    """
    sigs = _signatures(library)
    contributions: list[tuple[str, float, float]] = []

    def walk(node: Expr, at_start: bool, corun: bool, gate: float) -> None:
        if node.kind == "name":
            sig = _resolve(node.name, node.selector, sigs)
            m = (0.0 if at_start else 1.0) + (1.0 if corun else 0.0)
            factor = 1.0 + (gate / sig.static_power if sig.static_power > 0 else 0.0)
            contributions.append((sig.name, m * factor, sig.std_energy))
        elif node.kind == "par":
            for child in node.children:
                walk(child, at_start, True, gate)
        elif node.kind == "par_multi":
            parts = [evaluate(child, sigs, idle_power=idle_power) for child in node.children]
            times, var_t = [p.time for p in parts], [p.var_time for p in parts]
            last = max_probabilities(times, var_t)
            _, var_m = max_moments(times, var_t)
            draws = [_idle_draw(p, idle_power) for p in parts]
            for child, part, pi, v, p in zip(node.children, parts, last, var_t, draws, strict=True):
                walk(child, at_start, True, gate + pi * (sum(draws) - p))
                sd = p * math.sqrt(max(0.0, v * (1.0 - 2.0 * pi) + var_m))
                if sd > 0.0:
                    contributions.append((f"ι after {part.name}", 2.0, sd))
        elif node.kind == "seq":
            for i, child in enumerate(node.children):
                walk(child, at_start and i == 0, corun, gate)

    walk(expr, starts_at_null, False, 0.0)
    return accumulated_bias(contributions, confidence)
