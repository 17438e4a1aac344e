"""The layering of ARCHITECTURE.md, read off the code's own imports.

Every import of eopt or solvers, at module level, in a function or under
``TYPE_CHECKING``, is an arrow from the importing module to the imported one. Arrows may
only run down the layer order (or stay inside one package), no module may take part in
a circle, and ``solvers`` imports nothing of eopt.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import networkx as nx
import pytest

ROOT = Path(__file__).resolve().parents[1]
ARCHITECTURE = ROOT / "ARCHITECTURE.md"

#: Lowest first. A package may import from the packages before it, never after.
LAYERS = (
    "solvers",
    "eopt.model",
    "eopt.devices",
    "eopt.sim",
    "eopt.calculus",
    "eopt.attribute",
    "eopt.measure",
    "eopt.runs",
    "eopt.plan",
    "eopt.check",
    "eopt.apply",
    "eopt.report",
    "eopt.demo",
    "eopt.cli",
    "eopt",
)

#: No package may hold more than this share of the code lines.
MAX_SHARE = 0.12


def _modules() -> dict[str, Path]:
    found = {}
    for top in ("eopt", "solvers"):
        for path in sorted((ROOT / top).rglob("*.py")):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            found[name.removesuffix(".__init__")] = path
    return found


MODULES = _modules()


def _layer(module: str) -> str:
    """The layer a module belongs to: the longest layer name that prefixes it."""
    matches = [layer for layer in LAYERS if module == layer or module.startswith(layer + ".")]
    return max(matches, key=len)


def _imports(module: str, path: Path) -> list[tuple[str, int]]:
    """(imported module, line) for every import of eopt or solvers in the file."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1])
                target = f"{base}.{node.module}" if node.module else base
            else:
                target = node.module or ""
            for alias in node.names:
                # `from eopt.x import y` names the module eopt.x.y when there is one.
                full = f"{target}.{alias.name}"
                found.append((full if full in MODULES else target, node.lineno))
    return [(t, line) for t, line in found if t.split(".")[0] in ("eopt", "solvers")]


def _graph() -> nx.DiGraph:
    graph = nx.DiGraph()
    for module, path in MODULES.items():
        graph.add_node(module)
        for target, line in _imports(module, path):
            # `import eopt.x.y` reaches the deepest module it names that exists.
            while target not in MODULES and "." in target:
                target = target.rpartition(".")[0]
            if target != module:
                graph.add_edge(module, target, line=line)
    return graph


GRAPH = _graph()


def test_every_module_is_in_a_layer():
    packages = {m for m, p in MODULES.items() if p.name == "__init__.py"}
    top_level = {m for m in packages if m.count(".") <= 1}
    loose = {m for m in MODULES if m.startswith("eopt.") and m.count(".") == 1} - packages
    unlisted = sorted((top_level | loose) - set(LAYERS))
    assert not unlisted, f"add these to LAYERS (and ARCHITECTURE.md): {unlisted}"


def test_arrows_only_run_down_the_layers():
    upward = []
    for a, b, data in GRAPH.edges(data=True):
        la, lb = _layer(a), _layer(b)
        if la != lb and LAYERS.index(lb) > LAYERS.index(la):
            upward.append(f"{MODULES[a].relative_to(ROOT)}:{data['line']} imports {b}")
    assert not upward, "imports that run up a layer:\n" + "\n".join(sorted(upward))


def test_no_circles():
    cycles = [c for c in nx.simple_cycles(GRAPH) if len(c) > 1]
    assert not cycles, "modules that import each other: " + "; ".join(
        " → ".join([*c, c[0]]) for c in cycles[:5]
    )


def test_solvers_import_nothing_of_eopt():
    leaks = [(a, b) for a, b in GRAPH.edges() if a.startswith("solvers") and b.startswith("eopt")]
    assert not leaks


def _code_lines(path: Path) -> int:
    return sum(1 for line in path.read_text(encoding="utf-8").splitlines() if line.strip())


def test_no_package_holds_more_than_its_share_of_the_code():
    lines: dict[str, int] = {}
    for module, path in MODULES.items():
        layer = _layer(module)
        lines[layer] = lines.get(layer, 0) + _code_lines(path)
    total = sum(lines.values())
    heavy = {k: f"{v / total:.1%}" for k, v in lines.items() if v > MAX_SHARE * total}
    assert not heavy, f"packages over {MAX_SHARE:.0%} of {total} code lines: {heavy}"


def test_the_checker_sees_an_upward_arrow(tmp_path, monkeypatch):
    """The layer rule would catch the kind of import it exists for."""
    assert LAYERS.index(_layer("eopt.model.schedule")) < LAYERS.index(_layer("eopt.calculus"))
    fake = tmp_path / "m.py"
    fake.write_text("def f():\n    from eopt.calculus.uncertainty import c_alpha\n")
    monkeypatch.setitem(MODULES, "eopt.model.fake", fake)
    assert _imports("eopt.model.fake", fake) == [("eopt.calculus.uncertainty", 2)]


def test_architecture_names_every_layer_in_order():
    text = ARCHITECTURE.read_text(encoding="utf-8")
    table = re.search(r"<!-- layers -->(.*?)<!-- /layers -->", text, re.S)
    assert table, "ARCHITECTURE.md lost its layer table (<!-- layers --> … <!-- /layers -->)"
    named = re.findall(r"^\|\s*\d+\s*\|\s*`([\w./]+)`", table.group(1), re.M)
    as_modules = tuple(n.rstrip("/").removesuffix(".py").replace("/", ".") for n in named)
    assert as_modules == LAYERS[::-1] or as_modules == LAYERS, (
        f"ARCHITECTURE.md's layers {as_modules} differ from the enforced order {LAYERS}"
    )


@pytest.mark.parametrize("package", [p for p in LAYERS if p != "eopt" and "." in p])
def test_architecture_says_what_each_package_is_for(package):
    text = ARCHITECTURE.read_text(encoding="utf-8")
    folder = package.replace(".", "/")
    if (ROOT / f"{folder}.py").exists():
        folder += ".py"
    else:
        folder += "/"
    assert f"`{folder}`" in text, f"ARCHITECTURE.md does not describe {folder}"
