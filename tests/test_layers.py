"""The layers of the design card, checked on the source.

From the bottom: ``resources/`` (what keeps state: the store, the models, document reading) imports
nothing above it; the domain packages ``situate/contextual/`` (chunking, prompts, cleaning,
structural context, preambles, skipping, edits, blurb files) and ``situate/evaluation/`` (the
metrics and the fitted fusion) import no Dagster and nothing above them; ``assets/`` holds only
asset and check definitions and imports no wiring; ``pipelines/`` (the wiring and the command line)
import each other without a circle; ``situate/`` above all of them is the API for applications.
Every folder installs under the one top-level name ``situate`` (pyproject's package-dir), so no
module imports a bare ``assets``, ``resources`` or ``pipelines``.
"""

from __future__ import annotations

import ast
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

#: the repository folder of each installed package (pyproject.toml's [tool.setuptools.package-dir])
FOLDER = {
    "situate.resources": "resources",
    "situate.assets": "assets",
    "situate.pipelines": "pipelines",
    "situate.contextual": "situate/contextual",
    "situate.evaluation": "situate/evaluation",
}
DOMAIN = ("situate.contextual", "situate.evaluation")
API = ("situate.service", "situate.mcp_server", "situate.integrations")


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
    """Every module of installed package ``name``, subpackages included: ``{dotted name: imports}``."""
    out = {}
    root = REPO / FOLDER[name]
    for p in sorted(root.rglob("*.py")):
        parts = p.relative_to(root).with_suffix("").parts
        dotted = ".".join((name, *(parts[:-1] if parts[-1] == "__init__" else parts)))
        out[dotted] = _imports(p)
    return out


def _under(module: str, packages: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


def _bad(package: str, forbidden: tuple[str, ...]) -> dict[str, list[str]]:
    bad = {
        m: sorted(i for i in imps if _under(i, forbidden) or i == "situate") for m, imps in _package(package).items()
    }
    return {m: v for m, v in bad.items() if v}


def test_no_module_imports_a_bare_top_level_layer_name():
    """``assets``, ``resources`` and ``pipelines`` are installed as ``situate.*`` only: a bare import
    would load a second copy of the module (or another project's package of that name)."""
    tracked = subprocess.run(["git", "ls-files", "*.py"], cwd=REPO, capture_output=True, text=True, check=True)
    bare = {}
    for name in (n for n in tracked.stdout.split() if (REPO / n).is_file()):
        hits = sorted(i for i in _imports(REPO / name) if i.split(".")[0] in ("assets", "resources", "pipelines"))
        if hits:
            bare[name] = hits
    assert bare == {}


def test_the_domain_imports_no_dagster_and_nothing_above_it():
    for package in DOMAIN:
        assert _bad(package, ("dagster", "situate.assets", "situate.pipelines", *API)) == {}, package
    assert "situate.contextual.prompts" in _package("situate.contextual")
    assert "situate.evaluation.metrics" in _package("situate.evaluation")


def test_assets_hold_only_dagster_definitions():
    """Each module of ``assets/`` defines assets or checks (it imports Dagster); the plain logic
    they call lives in the domain packages and ``resources/``."""
    plain = sorted(m for m, imps in _package("situate.assets").items() if "dagster" not in imps)
    assert plain == ["situate.assets"]  # the package's __init__ alone


#: The top-level definitions of ``assets/`` that do not name Dagster themselves, and why they stay:
#: the pool and partition names the definitions share, a collection's name rule, resource roles and
#: default (the names every definition of a collection takes), the worker tags of a run (read by
#: the run reaper in ``pipelines/``) and the per-document progress line.
PLAIN_IN_ASSETS = {
    "collection.py": ["DEFAULT", "NAME_PATTERN", "ROLES"],
    "partitions.py": ["LLM_POOL", "PARTITIONS"],
    "per_document.py": ["WORKER_TAGS", "process_start"],
    "retrieval_eval.py": ["ROOT"],
}


def test_the_logic_of_the_assets_lives_below_them():
    """A top-level function, class or constant of ``assets/`` names Dagster (``dg.``), except the
    few of :data:`PLAIN_IN_ASSETS`: the logic the assets call is in the domain packages."""
    found = {}
    for path in sorted((REPO / "assets").glob("*.py")):
        names = []
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.Assign) and ast.unparse(node.value).startswith("build_"):
                continue  # the default collection's asset, made by the module's factory
            if isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.Assign)) and "dg." not in ast.unparse(node):
                names.append(node.name if not isinstance(node, ast.Assign) else ast.unparse(node.targets[0]))
        if names:
            found[path.name] = sorted(names)
    assert found == PLAIN_IN_ASSETS


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
    assert _bad("situate.resources", ("situate.assets", "situate.pipelines", *DOMAIN, *API)) == {}


def test_assets_import_no_wiring():
    assert _bad("situate.assets", ("situate.pipelines", *API)) == {}


def test_the_wiring_modules_import_each_other_without_a_circle():
    mods = _package("situate.pipelines")
    graph = {m: {i for i in imps if i in mods and i != m} for m, imps in mods.items()}
    # the command line imports the demo and the evaluation, so a back edge would show here
    assert (
        "situate.pipelines.demo" in graph["situate.pipelines.cli"]
        and "situate.pipelines.evaluate" in graph["situate.pipelines.cli"]
    )
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


def test_loading_the_code_location_and_the_servers_loads_no_bare_layer_name():
    """Importing the code location, the service and the MCP server (in a fresh interpreter, run
    from outside the repository) loads every module under ``situate.`` only: a module loaded twice,
    bare and under ``situate.``, would hold two copies of its classes."""
    import sys

    code = (
        "import sys, situate, situate.pipelines.definitions, situate.service, situate.mcp_server, "
        "situate.pipelines.cli; print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('assets', 'resources', 'pipelines')))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd="/", capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-1500:]
    assert out.stdout.strip() == "[]"
