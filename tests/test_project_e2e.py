"""A git working tree ingested end to end with the real default models: exactly what git tracks or
does not ignore is indexed, the ingest exits 0 naming the files it skipped by path, no line shows a
partition key, and a file that becomes ignored leaves the table and the BM25 index."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from conftest import needs_models, small_settings

from situate.resources.documents.keys import encode_key

#: The working tree: nested .gitignore files with a negation, an ignored build output and coverage
#: report, an empty __init__.py, a file .gitattributes marks generated, an untracked file that is
#: not ignored, an extensionless README.
TREE = {
    ".gitignore": "htmlcov/\nbuild/\n*.txt\n!docs/*.txt\n",
    "docs/.gitignore": "scratch.txt\n",
    ".gitattributes": "docs/reference.md linguist-generated\n",
    "docs/guide.md": "# Rotating keys\n\nRun `vault rotate` every 90 days; the old key stays valid for a day.\n",
    "docs/faq.txt": "Q: Where are the logs? A: In /var/log/vault, rotated weekly.\n",
    "docs/scratch.txt": "scratch notes that git ignores\n",
    "docs/reference.md": "# Reference\n\nGenerated from the sources: `rotate(key, days)`.\n",
    "src/vault/__init__.py": "",
    "src/vault/rotate.py": "def rotate(key: str, days: int = 90) -> str:\n    return key[::-1]\n",
    "examples/README": "Each example is a folder with a script that rotates a key.\n",
    "htmlcov/index.html": "<html><body><p>coverage 93%</p></body></html>\n",
    "build/lib/vault/rotate.py": "def rotate(key, days=90):\n    return key\n",
}
INDEXED = {"docs/guide.md", "docs/faq.txt", "docs/reference.md", "src/vault/rotate.py", "examples/README", "notes.md"}


def _git(root: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.email=t@example.org", "-c", "user.name=t", *args], cwd=root, check=True, capture_output=True
    )


def _ingest(repo: Path, home: Path, capsys) -> tuple[int, str]:
    from situate.pipelines.cli import main
    from situate.pipelines.settings import restored_env

    settings = small_settings(repo, home, context=None)
    with restored_env(tuple(settings) + ("SITUATE_CONTEXT", "SITUATE_CODE_CONTEXT")):
        os.environ.pop("SITUATE_CONTEXT", None)
        os.environ.pop("SITUATE_CODE_CONTEXT", None)
        os.environ.update(settings)
        code = main(["ingest", str(repo), "--home", str(home)])
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def _indexed(home: Path) -> tuple[dict[str, set[str]], set[str]]:
    """Each source's blurb statuses in the table, and the sources of the BM25 index's ids."""
    from situate.resources.store.retrieval import bm25_ids
    from situate.resources.store.store import Store

    store = Store(home=str(home))
    rows = store.columns(["chunk_id", "source", "blurb_status"]).to_pylist()
    by_id = {r["chunk_id"]: r["source"] for r in rows}
    statuses: dict[str, set[str]] = {}
    for r in rows:
        statuses.setdefault(r["source"], set()).add(r["blurb_status"])
    return statuses, {by_id.get(i, i) for i in bm25_ids(store.bm25_dir) or []}


@needs_models
def test_a_working_copy_is_ingested_as_git_sees_it(tmp_path, capsys):
    repo, home = tmp_path / "repo", tmp_path / "home"
    for rel, text in TREE.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text)
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "init")
    (repo / "notes.md").write_text("# Notes\n\nThe staging vault rotates keys hourly.\n")  # untracked

    code, out = _ingest(repo, home, capsys)
    assert code == 0, out
    statuses, bm25 = _indexed(home)
    assert set(statuses) == INDEXED and bm25 == INDEXED
    assert statuses["docs/reference.md"] == {"skipped:generated"}  # generated: no LLM call
    assert statuses["docs/guide.md"] == {"model"}  # prose: its summary from the model
    assert "src/vault/__init__.py" in out and "empty (0 bytes)" in out
    assert "ignored (.gitignore)" in out
    keys = {encode_key(p) for p in [*TREE, "notes.md"] if encode_key(p) != p}  # a key is never shown
    assert not [line for line in out.splitlines() if any(k in line for k in keys)], out

    with (repo / ".gitignore").open("a") as f:  # the untracked note becomes ignored: it leaves the index
        f.write("notes.md\n")
    code, out = _ingest(repo, home, capsys)
    assert code == 0, out
    statuses, bm25 = _indexed(home)
    assert set(statuses) == bm25 == INDEXED - {"notes.md"}
    assert "removed: notes.md" in out


def test_ingest_help_says_what_each_exit_status_means(capsys):
    from situate.pipelines.cli import main

    with pytest.raises(SystemExit):
        main(["ingest", "--help"])
    out = capsys.readouterr().out
    for status in ("0 ", "1 ", "2 ", "130 "):
        assert f"\n  {status}" in out
    assert "--include GLOB" in out and "--exclude GLOB" in out
