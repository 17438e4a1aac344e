"""The interaction graph (paper §4.4) and its file format ``eopt.interactions/1``.

Nodes are element types. A directed **entry** edge A → B says that the state A leaves
behind perturbs B's signature; an undirected **runtime** edge A ↔ B says that A and B
perturb each other when they co-run. Each edge carries its mechanisms (Table 1: thermal,
cache, power delivery, contention …), the contexts it was characterized over (Φ for an
entry edge, 𝒫 for a runtime edge), the signatures in the libraries that hold its
characterized values, and — as metadata only, never used by composition — the deviation
that triggered its characterization.

File layout (JSON)::

    {
      "schema": "eopt.interactions/1",
      "nodes": ["gemm", "softmax", "compute", "allreduce"],
      "edges": [
        {"kind": "entry", "from": "gemm", "to": "softmax",
         "mechanisms": ["thermal"],
         "characterized": [{"after": "gemm"}],
         "signature": "softmax",
         "deviation": {"energy_rel": 0.012, "z": 4.1}},
        {"kind": "runtime", "between": ["compute", "allreduce"],
         "mechanisms": ["memory bandwidth"],
         "characterized": [{"offset_s": 0}],
         "signature": "compute+allreduce"}
      ]
    }

* ``nodes`` is optional; every edge's endpoints are nodes.
* An entry edge's ``signature`` (default: its ``to``) names library signatures of the
  consumer whose ``context`` has the characterized entry context (``after`` the
  producer); ``characterized`` lists those entry contexts (at least one).
* A runtime edge points either to a composite pair signature (``signature``: a library
  element with ``context.runtime.corunners`` = the pair) or to each endpoint's co-run
  values (``signatures``: ``{endpoint: library element}``, each with the partner among
  its co-runners). ``characterized`` lists the co-scheduled configurations: how much
  later (``offset_s``) the second element starts.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from eopt.model.context import ContextError, EntryContext
from eopt.model.fileformats import (
    FileFormatError,
    Where,
    atomic_write_text,
    detect_kind,
    dumps_json,
    guard,
    json_ready,
    mapping,
    no_unknown,
    number,
    parse_json,
    read_text,
    required,
    sequence,
    string,
)

__all__ = [
    "SCHEMA",
    "EntryEdge",
    "InteractionGraph",
    "InteractionsError",
    "RuntimeEdge",
    "read_interactions",
    "write_interactions",
]

SCHEMA = "eopt.interactions/1"


class InteractionsError(FileFormatError):
    """An interaction graph that cannot be used; names the file, the edge and the fix."""


def _names(values: Iterable[str], what: str) -> tuple[str, ...]:
    out = tuple(values)
    for v in out:
        if not isinstance(v, str) or not v:
            raise ValueError(f"{what} must be non-empty names, got {v!r}")
    return out


@dataclass(frozen=True)
class EntryEdge:
    """A directed entry-context interaction ``source → target``.

    Attributes:
        source: The producer's element type (whose exit state matters).
        target: The consumer's element type (whose signature it perturbs).
        mechanisms: The responsible mechanisms (``thermal``, ``cache`` …).
        characterized: Φ: the entry contexts the consumer was characterized at.
        signature: The library element holding the consumer's values at those contexts.
        workload: θ the interaction was characterized at (free-form).
        deviation: The measured deviation that triggered it (metadata only).
    """

    source: str
    target: str
    mechanisms: tuple[str, ...] = ()
    characterized: tuple[EntryContext, ...] = ()
    signature: str = ""
    workload: Mapping[str, Any] = field(default_factory=dict)
    deviation: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _names((self.source, self.target), "an entry edge's endpoints")
        object.__setattr__(self, "mechanisms", _names(self.mechanisms, "mechanisms"))
        object.__setattr__(self, "characterized", tuple(self.characterized))
        if not self.characterized:
            raise ValueError(
                f"entry edge {self.label}: give the entry contexts it was characterized at "
                "(characterized)"
            )
        if not self.signature:
            object.__setattr__(self, "signature", self.target)
        object.__setattr__(self, "workload", dict(self.workload))
        object.__setattr__(self, "deviation", dict(self.deviation))

    @property
    def kind(self) -> Literal["entry"]:
        """``"entry"``."""
        return "entry"

    @property
    def label(self) -> str:
        """``A → B``."""
        return f"{self.source} → {self.target}"

    def to_dict(self) -> dict[str, Any]:
        """JSON layout of the edge."""
        out: dict[str, Any] = {
            "kind": "entry",
            "from": self.source,
            "to": self.target,
            "mechanisms": list(self.mechanisms),
            "characterized": [c.to_dict() for c in self.characterized],
            "signature": self.signature,
        }
        if self.workload:
            out["workload"] = json_ready(dict(self.workload))
        if self.deviation:
            out["deviation"] = json_ready(dict(self.deviation))
        return out


@dataclass(frozen=True)
class RuntimeEdge:
    """An undirected runtime-context interaction ``a ↔ b`` under co-execution.

    Attributes:
        pair: The two element types (sorted).
        mechanisms: The responsible mechanisms (``memory bandwidth``, ``interconnect`` …).
        offsets_s: 𝒫: the co-scheduled configurations characterized, as how much later
            the second of the pair starts, in s (0: they co-start).
        signature: A library element holding the pair's values as one composite
            (empty when ``signatures`` is given).
        signatures: Per endpoint, the library element holding its co-run values.
        workload: θ the interaction was characterized at (free-form).
        deviation: The measured deviation that triggered it (metadata only).
    """

    pair: tuple[str, str]
    mechanisms: tuple[str, ...] = ()
    offsets_s: tuple[float, ...] = (0.0,)
    signature: str = ""
    signatures: Mapping[str, str] = field(default_factory=dict)
    workload: Mapping[str, Any] = field(default_factory=dict)
    deviation: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        a, b = _names(self.pair, "a runtime edge's endpoints")
        object.__setattr__(self, "pair", tuple(sorted((a, b))))
        object.__setattr__(self, "mechanisms", _names(self.mechanisms, "mechanisms"))
        offsets = tuple(float(x) for x in self.offsets_s)
        if not offsets or any(not (x >= 0) for x in offsets):
            raise ValueError(f"runtime edge {self.label}: offsets_s must be ≥ 0 s, at least one")
        object.__setattr__(self, "offsets_s", offsets)
        per = dict(self.signatures)
        if bool(self.signature) == bool(per):
            raise ValueError(
                f"runtime edge {self.label}: give either 'signature' (the pair's composite "
                "signature) or 'signatures' (each endpoint's co-run values), not both or neither"
            )
        if per and set(per) != set(self.pair):
            raise ValueError(
                f"runtime edge {self.label}: 'signatures' must name both endpoints "
                f"{list(self.pair)}, got {sorted(per)}"
            )
        object.__setattr__(self, "signatures", per)
        object.__setattr__(self, "workload", dict(self.workload))
        object.__setattr__(self, "deviation", dict(self.deviation))

    @property
    def kind(self) -> Literal["runtime"]:
        """``"runtime"``."""
        return "runtime"

    @property
    def label(self) -> str:
        """``A ↔ B``."""
        return f"{self.pair[0]} ↔ {self.pair[1]}"

    @property
    def composite(self) -> bool:
        """Whether the pair is characterized as one composite element."""
        return bool(self.signature)

    def to_dict(self) -> dict[str, Any]:
        """JSON layout of the edge."""
        out: dict[str, Any] = {
            "kind": "runtime",
            "between": list(self.pair),
            "mechanisms": list(self.mechanisms),
            "characterized": [{"offset_s": x} for x in self.offsets_s],
        }
        if self.signature:
            out["signature"] = self.signature
        else:
            out["signatures"] = dict(self.signatures)
        if self.workload:
            out["workload"] = json_ready(dict(self.workload))
        if self.deviation:
            out["deviation"] = json_ready(dict(self.deviation))
        return out


Edge = EntryEdge | RuntimeEdge


@dataclass(frozen=True)
class InteractionGraph:
    """Characterized interactions between element types (paper §4.4).

    Attributes:
        entry: Directed entry-context edges, at most one per (source, target).
        runtime: Undirected runtime edges, at most one per pair.
        nodes: Element types (every edge endpoint, plus any listed alone).

    Example:
        >>> g = InteractionGraph(entry=(EntryEdge("gemm", "softmax",
        ...     characterized=(EntryContext(after="gemm"),)),))
        >>> g.entry_edge("gemm", "softmax").signature, g.entry_edge("softmax", "gemm")
        ('softmax', None)
    """

    entry: tuple[EntryEdge, ...] = ()
    runtime: tuple[RuntimeEdge, ...] = ()
    nodes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        entry, runtime = tuple(self.entry), tuple(self.runtime)
        seen: set[tuple[str, ...]] = set()
        for e in entry:
            key = ("entry", e.source, e.target)
            if key in seen:
                raise ValueError(f"entry edge {e.label} appears twice; merge the two")
            seen.add(key)
        for r in runtime:
            key = ("runtime", *r.pair)
            if key in seen:
                raise ValueError(f"runtime edge {r.label} appears twice; merge the two")
            seen.add(key)
        names = list(self.nodes)
        for e in entry:
            names += [e.source, e.target]
        for r in runtime:
            names += list(r.pair)
        object.__setattr__(self, "entry", entry)
        object.__setattr__(self, "runtime", runtime)
        object.__setattr__(self, "nodes", tuple(dict.fromkeys(names)))

    @property
    def empty(self) -> bool:
        """Whether the graph has no edges (everything composes context-independently)."""
        return not self.entry and not self.runtime

    def edges(self) -> Iterator[Edge]:
        """Every edge, entry edges first."""
        yield from self.entry
        yield from self.runtime

    def entry_edge(self, source: str, target: str) -> EntryEdge | None:
        """The edge ``source → target``, or None."""
        return next((e for e in self.entry if (e.source, e.target) == (source, target)), None)

    def runtime_edge(self, a: str, b: str) -> RuntimeEdge | None:
        """The edge ``a ↔ b`` (either order), or None."""
        pair = tuple(sorted((a, b)))
        return next((r for r in self.runtime if r.pair == pair), None)

    def to_dict(self) -> dict[str, Any]:
        """JSON layout ``eopt.interactions/1``."""
        return {
            "schema": SCHEMA,
            "nodes": list(self.nodes),
            "edges": [e.to_dict() for e in self.edges()],
        }

    @classmethod
    def from_dict(cls, data: Any, where: Where | None = None) -> InteractionGraph:
        """Inverse of :meth:`to_dict`, validating every field.

        Raises:
            InteractionsError: (or ``where``'s error type) naming the edge, the field and
                the fix.
        """
        at = where if where is not None else Where("<interactions>", error=InteractionsError)
        data = mapping(data, at, what=f"an {SCHEMA} object")
        schema = required(data, "schema", at, hint=f'write "schema": "{SCHEMA}"')
        if schema != SCHEMA:
            (at / "schema").fail(f"expected {SCHEMA!r}, got {schema!r}")
        no_unknown(data, {"schema", "nodes", "edges"}, at)
        nodes = sequence(data.get("nodes", []), at / "nodes", what="a list of element types")
        node_names = tuple(
            string(n, at / "nodes" / i, what="an element type") for i, n in enumerate(nodes)
        )
        edges = sequence(required(data, "edges", at), at / "edges", what="a list of edges")
        entry: list[EntryEdge] = []
        runtime: list[RuntimeEdge] = []
        for i, raw in enumerate(edges):
            edge = _edge(raw, at / "edges" / i)
            (entry if isinstance(edge, EntryEdge) else runtime).append(edge)
        try:
            return cls(tuple(entry), tuple(runtime), node_names)
        except ValueError as exc:
            (at / "edges").fail(str(exc))


def _common(data: Mapping[str, Any], at: Where) -> dict[str, Any]:
    mechs = sequence(data.get("mechanisms", []), at / "mechanisms", what="a list of mechanisms")
    return {
        "mechanisms": tuple(
            string(m, at / "mechanisms" / i, what="a mechanism") for i, m in enumerate(mechs)
        ),
        "workload": mapping(data.get("workload", {}), at / "workload"),
        "deviation": mapping(data.get("deviation", {}), at / "deviation"),
    }


def _edge(raw: Any, at: Where) -> Edge:
    data = mapping(raw, at, what='an edge object with "kind": "entry" or "runtime"')
    kind = required(data, "kind", at, hint='"entry" (directed) or "runtime" (undirected)')
    try:
        if kind == "entry":
            no_unknown(
                data,
                {"kind", "from", "to", "mechanisms", "characterized", "signature", "workload",
                 "deviation"},
                at,
            )  # fmt: skip
            source = string(required(data, "from", at), at / "from", what="an element type")
            target = string(required(data, "to", at), at / "to", what="an element type")
            at = Where(at.file, f"{at.path} ({source} → {target})", at.line, at.error)
            contexts = sequence(
                required(data, "characterized", at, hint="the entry contexts, e.g. "
                         f'[{{"after": "{source}"}}]'),
                at / "characterized",
                what="a list of entry contexts",
                nonempty=True,
            )  # fmt: skip
            phi = tuple(
                EntryContext.from_dict(c, at / "characterized" / i) for i, c in enumerate(contexts)
            )
            sig = data.get("signature", target)
            return EntryEdge(
                source,
                target,
                characterized=phi,
                signature=string(sig, at / "signature", what="a library element name"),
                **_common(data, at),
            )
        if kind == "runtime":
            no_unknown(
                data,
                {"kind", "between", "mechanisms", "characterized", "signature", "signatures",
                 "workload", "deviation"},
                at,
            )  # fmt: skip
            between = sequence(
                required(data, "between", at), at / "between", what="a list of two element types"
            )
            if len(between) != 2:
                (at / "between").fail(f"expected two element types, got {len(between)}")
            a = string(between[0], at / "between" / 0, what="an element type")
            b = string(between[1], at / "between" / 1, what="an element type")
            at = Where(at.file, f"{at.path} ({a} ↔ {b})", at.line, at.error)
            configs = sequence(
                data.get("characterized", [{"offset_s": 0.0}]),
                at / "characterized",
                what='a list of co-run configurations like {"offset_s": 0}',
                nonempty=True,
            )
            offsets = []
            for i, c in enumerate(configs):
                c = mapping(c, at / "characterized" / i, what='an object like {"offset_s": 0}')
                no_unknown(c, {"offset_s"}, at / "characterized" / i)
                offsets.append(
                    number(
                        c.get("offset_s", 0.0),
                        at / "characterized" / i / "offset_s",
                        unit="s",
                        min=0,
                    )
                )
            sig = data.get("signature")
            per = mapping(
                data.get("signatures", {}), at / "signatures", what="an object endpoint → element"
            )
            if (sig is None) == (not per):
                at.fail(
                    "give either 'signature' (the pair measured as one composite) or "
                    "'signatures' ({endpoint: library element} of each one's co-run values)"
                )
            if per and set(per) != {a, b}:
                (at / "signatures").fail(
                    f"expected an entry for each of {a!r} and {b!r}, got {sorted(per)}"
                )
            return RuntimeEdge(
                (a, b),
                offsets_s=tuple(offsets),
                signature=""
                if sig is None
                else string(sig, at / "signature", what="a library element name"),
                signatures={
                    k: string(v, at / "signatures" / k, what="a library element name")
                    for k, v in per.items()
                },
                **_common(data, at),
            )
    except (ContextError, ValueError) as exc:
        if isinstance(exc, InteractionsError):
            raise
        at.fail(str(exc))
    (at / "kind").fail(f'expected "entry" (directed) or "runtime" (undirected), got {kind!r}')


def read_interactions(path: str | os.PathLike[str]) -> InteractionGraph:
    """Read an ``eopt.interactions/1`` file.

    Raises:
        InteractionsError: naming the file, the edge (index and endpoints), the field and
            the fix; a file of another eopt kind is named for what it is.
    """
    at = Where(str(path), error=InteractionsError)
    try:
        with guard(at, what="an interaction graph"):
            text = read_text(path, at, what="an interaction graph")
            return InteractionGraph.from_dict(parse_json(text, at), at)
    except InteractionsError:
        found = detect_kind(path)
        if found is not None and found.key != "interactions":
            # Another eopt file (a plan, a library …): say what it is, not why it fails.
            at.fail(f"this is {found.described()}, not an interaction graph ({SCHEMA})")
        raise


def write_interactions(path: str | os.PathLike[str], graph: InteractionGraph) -> None:
    """Write ``graph`` to ``path`` (replacing it atomically) as strict JSON."""
    atomic_write_text(path, dumps_json(graph.to_dict(), str(path), indent=2) + "\n")
