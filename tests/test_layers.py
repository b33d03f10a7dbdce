"""The layers of the design card, checked on the source: ``resources/`` imports no asset and no
wiring, ``assets/`` imports no wiring, and the modules of ``pipelines/`` import each other
without a circle (lazy imports inside functions included)."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _imports(path: Path) -> set[str]:
    """Every module ``path`` imports, at any depth of the file."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
            out.update(f"{node.module}.{a.name}" for a in node.names)
    return out


def _package(name: str) -> dict[str, set[str]]:
    """Every module of package ``name``, subpackages included: ``{dotted name: imports}``."""
    out = {}
    for p in sorted((REPO / name).rglob("*.py")):
        parts = p.relative_to(REPO).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = _imports(p)
    return out


def test_resources_are_grouped_by_what_they_keep():
    """``resources/`` holds three subpackages (the store, the models, document reading) and no
    flat module besides its ``__init__``, ``errors`` (every layer's exceptions, one base) and
    ``settings`` (every setting's name, default, bounds and help)."""
    flat = sorted(p.name for p in (REPO / "resources").glob("*.py") if p.name != "__init__.py")
    assert flat == ["errors.py", "settings.py"]
    assert {p.name for p in (REPO / "resources").iterdir() if (p / "__init__.py").exists()} == {
        "store",
        "models",
        "documents",
    }


def test_resources_import_no_asset_and_no_wiring():
    bad = {
        m: sorted(i for i in imps if i.split(".")[0] in ("assets", "pipelines"))
        for m, imps in _package("resources").items()
    }
    assert {m: v for m, v in bad.items() if v} == {}


def test_assets_import_no_wiring():
    bad = {m: sorted(i for i in imps if i.split(".")[0] == "pipelines") for m, imps in _package("assets").items()}
    assert {m: v for m, v in bad.items() if v} == {}


def test_the_wiring_modules_import_each_other_without_a_circle():
    mods = _package("pipelines")
    graph = {m: {i for i in imps if i in mods and i != m} for m, imps in mods.items()}
    # pipelines.cli imports pipelines.demo and pipelines.evaluate, so a back edge would show here
    assert "pipelines.demo" in graph["pipelines.cli"] and "pipelines.evaluate" in graph["pipelines.cli"]
    state: dict[str, int] = {}
    cycle: list[str] = []

    def visit(m: str, path: list[str]) -> bool:
        state[m] = 1
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                cycle.extend(path[path.index(n) :] + [m, n] if n in path else [m, n])
                return True
            if n not in state and visit(n, path + [m]):
                return True
        state[m] = 2
        return False

    assert not any(visit(m, []) for m in sorted(graph) if m not in state), cycle
