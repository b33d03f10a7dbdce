"""The labelled corpora come with the repository (``eval/``): each data file is the one its
``SHA256SUMS`` lists (and, where the developers' copy ``../shared/eval`` is beside the checkout,
byte-identical to it), only the developers' halves of the queries are there, each set carries its
licence, and ``situate eval`` finds them without a path."""

import hashlib
import json

import pytest
from conftest import EVAL_DATA, REPO

from situate.evaluation import data

SHARED = REPO.parent / "shared" / "eval"


def _sums() -> dict[str, str]:
    lines = (EVAL_DATA / "SHA256SUMS").read_text().splitlines()
    return {name: digest for digest, name in (line.split("  ", 1) for line in lines)}


def test_each_data_file_is_the_one_listed_and_no_other_is_there():
    sums = _sums()
    assert sorted(sums) == sorted(
        f"{s}/{f}" for s in ("codebase", "docs", "cosqa") for f in (f"{s}_chunks.json", "queries_dev.jsonl")
    )
    for name, digest in sums.items():
        assert hashlib.sha256((EVAL_DATA / name).read_bytes()).hexdigest() == digest, name
    # the held-back halves of the queries are never in the repository
    files = {str(p.relative_to(EVAL_DATA)) for p in EVAL_DATA.rglob("*") if p.is_file()}
    assert files == set(sums) | {"README.md", "SHA256SUMS", "codebase/LICENSE", "docs/LICENSE", "cosqa/LICENSE"}


@pytest.mark.skipif(not SHARED.is_dir(), reason="the developers' copy ../shared/eval is not beside this checkout")
def test_the_data_files_are_byte_identical_to_the_developers_copy():
    for name in _sums():
        assert (EVAL_DATA / name).read_bytes() == (SHARED / name).read_bytes(), name


def test_the_sets_hold_what_their_readme_says():
    queries = {s: (EVAL_DATA / s / "queries_dev.jsonl").read_text().splitlines() for s in data.SETS}
    assert {s: len(q) for s, q in queries.items()} == {"codebase": 124, "docs": 50, "cosqa": 500}
    corpora = {s: json.loads(data.corpus_file(s).read_text()) for s in data.SETS}
    assert {s: len(c) for s, c in corpora.items()} == {"codebase": 90, "docs": 45, "cosqa": 6267}
    assert sum(len(d["chunks"]) for d in corpora["codebase"]) == 737
    # every golden chunk a query names is in its corpus
    for s in data.SETS:
        chunks = {(d["doc_id"], int(c["original_index"])) for d in corpora[s] for c in d["chunks"]}
        golden = {(g[0], int(g[1])) for line in queries[s] for g in json.loads(line)["golden"]}
        assert golden <= chunks, s


def test_each_set_carries_its_licence():
    for s in ("codebase", "docs"):
        text = (EVAL_DATA / s / "LICENSE").read_text()
        assert "anthropics/anthropic-cookbook" in text and "MIT License" in text
        assert "Copyright (c) 2023 Anthropic" in text
    cuda = (EVAL_DATA / "cosqa" / "LICENSE").read_text()
    assert "Jun-jie-Huang/CoCLR" in cuda and "Computational Use of Data Agreement v1.0" in cuda
    assert "3.1.2. You bind each recipient" in cuda and "CoSQA: 20,000+ Web Queries" in cuda


def test_situate_eval_finds_the_sets_without_a_path(tmp_path, monkeypatch):
    corpus, queries = data.resolve_eval_paths(None, None)
    assert (corpus, queries) == (str(data.corpus_file("codebase")), str(data.queries_file("codebase")))
    assert data.resolve_eval_paths("docs", None) == (str(data.corpus_file("docs")), str(data.queries_file("docs")))
    given = str(data.corpus_file("cosqa"))
    assert data.resolve_eval_paths(given, None) == (given, str(data.queries_file("cosqa")))
    assert data.resolve_eval_paths("mine.json", "q.jsonl") == ("mine.json", "q.jsonl")
    assert data.resolve_eval_paths("mine.json", None) == ("mine.json", None)
    monkeypatch.setattr(data, "EVAL_DATA", tmp_path / "eval")  # an install without the repository
    with pytest.raises(FileNotFoundError, match=r"comes with situate's repository.*give --corpus FILE"):
        data.resolve_eval_paths(None, None)


def test_situate_eval_without_a_corpus_reads_the_codebase_set(monkeypatch, capsys):
    """The command line passes the resolved paths on (the run itself is stubbed: scoring needs the
    models and minutes)."""
    from situate.pipelines import cli, evaluate

    seen = {}

    def fake_run_eval(corpus, queries, *args, **kwargs):  # FAKE: records what the command asked for
        seen.update(corpus=corpus, queries=queries)
        raise ValueError("stop here")

    monkeypatch.setattr(evaluate, "run_eval", fake_run_eval)
    assert cli.main(["eval", "--configs", "chunk"]) == 2
    assert seen == {"corpus": str(data.corpus_file("codebase")), "queries": str(data.queries_file("codebase"))}
    assert "stop here" in capsys.readouterr().err
