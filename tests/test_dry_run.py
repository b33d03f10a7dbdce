"""``situate ingest --dry-run`` (and ``--estimate``'s folders and skipped files): what an ingest
of a git working tree would read, by top folder and kind, the LLM calls of each folder, and every
file it would skip with the reason, before any model is loaded or anything written."""

import json
import os
import subprocess
from pathlib import Path

import pytest
from conftest import needs_models, small_settings

from situate.pipelines.cli import main
from situate.pipelines.dry_run import SHOWN_PATHS, skipped_lines

#: Settings that would change what the dry run counts: cleared in each test here.
SETTINGS = ("SITUATE_CONTEXT", "SITUATE_CODE_CONTEXT", "SITUATE_INCLUDE", "SITUATE_EXCLUDE", "SITUATE_GENERATED")


@pytest.fixture
def project(tmp_path, monkeypatch) -> Path:
    """A git working tree: docs/ with 2 Markdown files, src/ with 2 Python files and an empty
    ``__init__.py``, a lock file at the top, and a coverage report that ``.gitignore`` lists."""
    for name in SETTINGS:
        monkeypatch.delenv(name, raising=False)
    root = tmp_path / "project"
    files = {
        ".gitignore": "htmlcov/\n",
        "docs/keys.md": "# Keys\n\nRotate the signing keys every 90 days.\n",
        "docs/deploy.md": "# Deploy\n\nDeploys go out on Tuesdays.\n",
        "src/app.py": "def main():\n    return 1\n",
        "src/util.py": "def add(a, b):\n    return a + b\n",
        "src/__init__.py": "",
        "package-lock.json": "{}\n",
        "htmlcov/index.html": "<html><body><p>coverage 91%</p></body></html>\n",
    }
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    return root


def _dry_run(project: Path, tmp_path: Path, capsys) -> tuple[dict, str]:
    """``situate ingest PROJECT --dry-run --json OUT``: its JSON and its printed lines."""
    out, home = tmp_path / "dry.json", tmp_path / "home"
    assert main(["ingest", str(project), "--dry-run", "--home", str(home), "--json", str(out)]) == 0
    assert not home.exists()  # nothing written
    return json.loads(out.read_text()), capsys.readouterr().out


def test_the_dry_run_counts_each_folder_and_names_what_it_skips(project, tmp_path, capsys):
    got, printed = _dry_run(project, tmp_path, capsys)
    folders = got["folders"]
    assert set(folders) == {"docs/", "src/", "./"}
    # the defaults: a summary call a prose document, none for code; a lock file gets none
    assert folders["docs/"] | {"bytes": 0} == {
        "prose": 2,
        "code": 0,
        "other": 0,
        "bytes": 0,
        "llm_calls": 2,
        "per_chunk": 0,
    }
    assert (folders["src/"]["code"], folders["src/"]["prose"], folders["src/"]["llm_calls"]) == (2, 0, 0)
    assert (folders["./"]["other"], folders["./"]["llm_calls"]) == (1, 0)
    assert folders["docs/"]["bytes"] == sum(p.stat().st_size for p in (project / "docs").iterdir())
    assert (got["documents"], got["llm_calls"], got["per_chunk"]) == (5, 2, 0)
    assert got["skipped"]["htmlcov/"] == "ignored (.gitignore)"
    assert got["skipped"]["src/__init__.py"] == "empty (0 bytes)"
    assert got["skipped_folders"]["htmlcov/"] == [1, (project / "htmlcov" / "index.html").stat().st_size]
    lines = printed.splitlines()
    assert lines[1].startswith("situate: dry run: 5 documents in 3 top folders")
    assert lines[2] == (
        "situate: dry run: listed as a git working tree: the files git tracks and the untracked ones it does not ignore"
    )
    assert got["listed"] == "git working tree"
    assert "LLM calls of a cold ingest: 2 (prose: document, one LLM call a document; code: structure" in lines[1]
    row = next(line for line in lines if line.startswith("situate: dry run: docs/"))
    assert row.split()[4:8] == ["2", "2", "0", "0"] and row.endswith("  2"), row
    total = next(line for line in lines if line.startswith("situate: dry run: total"))
    size = sum(f["bytes"] for f in folders.values())
    assert total.split()[4:] == ["5", "2", "2", "1", str(size), "bytes", "2"], total
    report = got["skipped_folders"]["htmlcov/"][1]
    assert f"situate: dry run: skipped 1 file, ignored (.gitignore): htmlcov/ (1 file, {report} bytes)" in lines
    assert "situate: dry run: skipped 1 file, hidden: .gitignore" in lines  # not tracked
    assert "situate: dry run: skipped 1 file, empty: src/__init__.py" in lines
    assert "--estimate" in lines[-1]


def test_the_dry_run_follows_the_context_settings(project, tmp_path, capsys, monkeypatch):
    """Chunk mode: a call per chunk (not counted); code in document mode: a call a file."""
    monkeypatch.setenv("SITUATE_CONTEXT", "chunk")
    monkeypatch.setenv("SITUATE_CODE_CONTEXT", "document")
    got, printed = _dry_run(project, tmp_path, capsys)
    assert (got["folders"]["docs/"]["llm_calls"], got["folders"]["docs/"]["per_chunk"]) == (0, 2)
    assert (got["folders"]["src/"]["llm_calls"], got["folders"]["src/"]["per_chunk"]) == (2, 0)
    assert got["folders"]["./"]["llm_calls"] == 0  # the lock file: no call in any mode
    assert "LLM calls of a cold ingest: 2 + a call per chunk of 2 documents" in printed
    assert "0 + a call per chunk of 2" in next(line for line in printed.splitlines() if "dry run: docs/" in line)


def test_an_exclude_glob_and_a_missing_folder(project, tmp_path, capsys):
    out = tmp_path / "dry.json"
    assert main(["ingest", str(project), "--dry-run", "--exclude", "docs/deploy.md", "--json", str(out)]) == 0
    got = json.loads(out.read_text())
    assert got["skipped"]["docs/deploy.md"] == "excluded (exclude setting)" and got["llm_calls"] == 1
    assert main(["ingest", str(tmp_path / "nowhere"), "--dry-run"]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_a_reader_that_goes_away_ends_the_command_quietly(project, monkeypatch, capsys):
    """`situate ingest --dry-run | head -1`: standard output's reader is gone before the listing is
    printed; the command stops with 141 (128 + SIGPIPE, as a shell reports it), no traceback."""
    import sys

    r, w = os.pipe()
    os.close(r)
    with os.fdopen(w, "w", buffering=1) as gone:
        monkeypatch.setattr(sys, "stdout", gone)
        assert main(["ingest", str(project), "--dry-run"]) == 141
        monkeypatch.undo()
    assert "Traceback" not in capsys.readouterr().err


def test_skipped_lines_name_at_most_ten_paths_a_reason_and_each_folder_once():
    skipped = {f"img/{i:02}.png": "unknown format (.png)" for i in range(SHOWN_PATHS + 3)}
    skipped |= {"data.bin": "unknown format (.bin)", "build/": "ignored (.gitignore)"}
    skipped |= {
        "build/.gitignore": "ignored (.gitignore)",
        "a/x.md": "empty (0 bytes)",
        "b.md": "empty (3 bytes, whitespace only)",
    }
    lines = skipped_lines(skipped, {"build/": [120, 2_500_000]})
    assert lines[0] == "skipped 120 files, ignored (.gitignore): build/ (120 files, 2.5 MB)"
    assert lines[1].startswith("skipped 14 files, unknown format (.png 13, .bin 1): data.bin, img/00.png,")
    assert lines[1].endswith("img/08.png and 4 more")
    assert lines[2] == "skipped 2 files, empty: a/x.md, b.md"


@needs_models
def test_the_estimate_gives_the_llm_time_of_each_folder(project, tmp_path):
    """``--estimate`` on the same tree: the LLM requests and seconds by top folder (the prose of
    docs/ only), and the same skipped files."""
    from situate.pipelines.estimate import estimate
    from situate.pipelines.settings import resources_from_env, restored_env

    env = small_settings(project, tmp_path / "home", context=None)
    with restored_env(tuple(env)):
        os.environ.update(env)
        est = estimate(resources_from_env(plain=True))
    assert est.requests == 2 and not (tmp_path / "home").exists()
    docs, src = est.by_folder["docs/"], est.by_folder["src/"]
    assert (docs["documents"], docs["requests"], src["documents"], src["requests"]) == (2, 2, 2, 0)
    assert docs["prompt_written"] == est.prompt_written and src["llm_seconds"] == 0
    llm = est.wall_seconds - est.rates["start_seconds"] - est.readable * est.rates["document_seconds"]
    # the LLM's share of the wall time, the embedder's not in it (both are rounded to 0.1 s)
    assert 0 < docs["llm_seconds"] <= llm + 0.1 and docs["llm_seconds"] <= est.wall_seconds - est.rates["start_seconds"]
    assert est.skipped["htmlcov/"] == "ignored (.gitignore)" and est.skipped["src/__init__.py"] == "empty (0 bytes)"
    lines = est.lines()
    assert lines[0].startswith("documents: 5 (5 readable); LLM requests of a cold ingest: 2")
    assert any(line.startswith("by folder: docs/ 2 documents, 2 LLM requests, LLM time about ") for line in lines)
    assert "by folder: src/ 2 documents, 0 LLM requests, LLM time about 0 s" in lines
    report = (project / "htmlcov" / "index.html").stat().st_size
    assert f"skipped 1 file, ignored (.gitignore): htmlcov/ (1 file, {report} bytes)" in lines


def test_the_examples_of_the_module_hold():
    import doctest

    import situate.pipelines.dry_run

    assert doctest.testmod(situate.pipelines.dry_run).failed == 0


def test_files_an_include_glob_takes_back_are_not_counted_as_skipped(project, tmp_path, capsys):
    """``--include htmlcov/keep.html`` reads that file of the ignored report: the skipped folder's
    count is the other files alone."""
    (project / "htmlcov" / "keep.html").write_text("<html><body><p>keep this page</p></body></html>\n")
    out = tmp_path / "dry.json"
    assert main(["ingest", str(project), "--dry-run", "--include", "htmlcov/keep.html", "--json", str(out)]) == 0
    got = json.loads(out.read_text())
    assert got["folders"]["htmlcov/"]["prose"] == 1
    assert got["skipped_folders"]["htmlcov/"] == [1, (project / "htmlcov" / "index.html").stat().st_size]


def test_the_dry_run_lists_the_folder_once_and_a_new_file_is_seen_at_once(project, tmp_path, capsys, monkeypatch):
    from situate.resources.documents import listing

    calls = []
    real = listing.list_project
    monkeypatch.setattr(listing, "list_project", lambda root, rules=None: calls.append(root) or real(root, rules))
    got, _ = _dry_run(project, tmp_path, capsys)
    assert got["listed"] == "git working tree" and len(calls) == 1  # how it was listed: from the same listing
    (project / "docs" / "new.md").write_text("# New\n\nA page written after the first run.\n")
    again, _ = _dry_run(project, tmp_path, capsys)
    assert again["folders"]["docs/"]["prose"] == 3 and len(calls) == 2  # discovery lists afresh each time
