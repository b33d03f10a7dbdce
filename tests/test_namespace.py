"""Installing situate claims one top-level name, ``situate``: a Dagster project with its own
``assets`` and ``resources`` packages installs situate into its environment and imports both.

The wheel is built from this checkout (setuptools, no network), installed with no dependencies
into a fresh virtual environment whose dependencies come from this checkout's ``.venv`` through a
``.pth`` line (so nothing is downloaded), and a small project with its own ``assets`` and
``resources`` packages loads its definitions merged with situate's, from its own folder.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import textwrap
import venv
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _build_wheel(out: Path) -> Path:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(out),
            str(REPO),
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    (wheel,) = out.glob("situate-*.whl")
    return wheel


def _fresh_env(tmp: Path, wheel: Path) -> Path:
    """A virtual environment with the wheel installed and this .venv's packages readable (not installed)."""
    env_dir = tmp / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    python = env_dir / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    # the dependencies, read from this checkout's environment (its editable situate is not: a path
    # added by a .pth line does not run that folder's own .pth files)
    Path(site, "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", "--no-deps", str(wheel)],
        check=True,
        capture_output=True,
        text=True,
    )
    return python


PROJECT = {
    "assets/__init__.py": "WHOSE = 'the project'\n",
    "assets/reports.py": textwrap.dedent(
        """
        import dagster as dg

        @dg.asset
        def weekly_report() -> str:
            return "report"
        """
    ),
    "resources/__init__.py": "WHOSE = 'the project'\n",
    "definitions.py": textwrap.dedent(
        """
        import dagster as dg

        import assets
        import resources
        from assets.reports import weekly_report
        from situate.pipelines.definitions import build_definitions
        import situate.assets.blurbs
        import situate.resources.store

        situate_defs = build_definitions(docs_path="docs", home="data")
        defs = dg.Definitions.merge(dg.Definitions(assets=[weekly_report]), situate_defs)
        keys = sorted(k.to_user_string() for k in defs.resolve_asset_graph().get_all_asset_keys())
        print("project:", assets.WHOSE, resources.WHOSE, assets.__file__, resources.__file__)
        print("situate:", situate.assets.blurbs.__file__, situate.resources.store.__file__)
        print("keys:", " ".join(keys))
        """
    ),
}


def test_a_project_with_its_own_assets_and_resources_packages_imports_situate(tmp_path):
    wheel = _build_wheel(tmp_path / "dist")
    names = zipfile.ZipFile(wheel).namelist()
    assert "situate/resources/models/data/code-adapter-bge-small-en-v1.5.npy" in names  # the code query map ships
    tops = {name.split("/")[0] for name in names}
    assert tops == {"situate", wheel.name.split("-")[0] + "-" + wheel.name.split("-")[1] + ".dist-info"}
    python = _fresh_env(tmp_path, wheel)
    project = tmp_path / "project"
    for rel, text in PROJECT.items():
        (project / rel).parent.mkdir(parents=True, exist_ok=True)
        (project / rel).write_text(text)
    (project / "docs").mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SITUATE_", "DAGSTER_HOME", "PYTHON"))}
    env["DAGSTER_HOME"] = str(tmp_path / "dagster_home")
    (tmp_path / "dagster_home").mkdir()
    out = subprocess.run(
        [str(python), "definitions.py"], cwd=project, env=env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-2000:]
    lines = dict(line.split(": ", 1) for line in out.stdout.splitlines() if ": " in line)
    own_assets, own_resources = lines["project"].split()[-2:]
    assert lines["project"].startswith("the project the project")
    assert Path(own_assets) == project / "assets" / "__init__.py"
    assert Path(own_resources) == project / "resources" / "__init__.py"
    site = str(python.parent.parent)
    assert all(p.startswith(site) for p in lines["situate"].split()), lines["situate"]
    keys = set(lines["keys"].split())
    assert {"weekly_report", "raw_documents", "chunks", "blurbs", "embeddings", "bm25_index"} <= keys
