"""The metric against hand-computed values, dataset loading, ranking and fusion (pure logic)."""

import json

import numpy as np
import pytest

from situate.evaluation import metrics as ev
from situate.resources.store.retrieval import fuse, rrf, weighted_fusion


def test_pass_at_k_by_hand():
    golden = [("a", 1), ("a", 2), ("b", 0)]
    ranked = [("a", 2), ("c", 0), ("b", 0), ("a", 9), ("a", 1)]
    assert ev.pass_at_k(ranked, golden, 1) == pytest.approx(1 / 3)
    assert ev.pass_at_k(ranked, golden, 3) == pytest.approx(2 / 3)
    assert ev.pass_at_k(ranked, golden, 5) == 1.0
    assert ev.pass_at_k([], golden, 20) == 0.0
    with pytest.raises(ValueError):
        ev.pass_at_k(ranked, [], 5)


def test_mrr_and_golden_ranks_by_hand():
    ranked = [("x", 0), ("y", 0), ("g", 1), ("g", 2)]
    assert ev.mrr_at_k(ranked, [("g", 2), ("g", 1)], 10) == pytest.approx(1 / 3)
    assert ev.mrr_at_k(ranked, [("g", 2)], 3) == 0.0
    assert ev.golden_ranks(ranked, [("g", 2), ("z", 0)]) == [4, None]


def test_score_over_queries_by_hand():
    qs = [ev.Query("1", "q1", [("d", 0)]), ev.Query("2", "q2", [("d", 1), ("d", 2)])]
    r1 = [("d", 0)] + [("x", i) for i in range(30)]  # golden at rank 1
    r2 = [("x", i) for i in range(7)] + [("d", 1)] + [("x", i) for i in range(7, 30)] + [("d", 2)]
    s = ev.score([r1, r2], qs)
    # query 2: one of two golden at rank 8 (inside 10 and 20), the other beyond 20
    assert s["pass@5"] == pytest.approx(100 * (1 + 0) / 2)
    assert s["pass@10"] == pytest.approx(100 * (1 + 0.5) / 2)
    assert s["pass@20"] == pytest.approx(100 * (1 + 0.5) / 2)
    assert s["failure@20"] == pytest.approx(25.0)
    assert s["mrr@10"] == pytest.approx((1 + 1 / 8) / 2, abs=1e-4)


def test_fusions_by_hand():
    dense, sparse = ["a", "b", "c"], ["c", "a"]
    fused = rrf([dense, sparse])
    assert [i for i, _ in fused] == ["a", "c", "b"]
    assert [s for _, s in fused] == pytest.approx([1 / 61 + 1 / 62, 1 / 63 + 1 / 61, 1 / 62])
    w = dict(weighted_fusion([dense, sparse]))
    assert w == pytest.approx({"a": 0.8 + 0.1, "b": 0.4, "c": 0.8 / 3 + 0.2})
    assert [i for i, _ in fuse([dense, sparse], "weighted")] == ["a", "c", "b"]
    with pytest.raises(ValueError, match="unknown fusion"):
        fuse([dense], "borda")


def test_load_queries_and_errors(tmp_path):
    p = tmp_path / "q.jsonl"
    p.write_text(json.dumps({"query_id": "q1", "query": "x?", "golden": [["doc_1", 2], ["doc_1", 2]]}) + "\n\n")
    (q,) = ev.load_queries(p)
    assert q.golden == [("doc_1", 2)]  # duplicates collapse
    p.write_text('{"query": "no golden"}\n')
    with pytest.raises(ValueError, match="q.jsonl:1"):
        ev.load_queries(p)


def test_load_beir_document_level(tmp_path):
    (tmp_path / "qrels").mkdir()
    (tmp_path / "corpus.jsonl").write_text(
        json.dumps({"_id": "d1", "title": "Tides", "text": "The Moon pulls the sea."})
        + "\n"
        + json.dumps({"_id": "d2", "title": "", "text": "Cats sleep."})
        + "\n"
    )
    (tmp_path / "queries.jsonl").write_text(
        json.dumps({"_id": "q1", "text": "what causes tides"})
        + "\n"
        + json.dumps({"_id": "q2", "text": "unjudged"})
        + "\n"
    )
    (tmp_path / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq1\td2\t0\n")
    corpus, queries = ev.load_beir(tmp_path)
    assert [d["doc_id"] for d in corpus] == ["d1", "d2"]
    assert corpus[0]["content"] == "Tides\n\nThe Moon pulls the sea." == corpus[0]["chunks"][0]["content"]
    assert [(q.query_id, q.golden) for q in queries] == [("q1", [("d1", 0)])]


def test_dense_and_bm25_rankings():
    ids = ["a", "b", "c"]
    docs = np.eye(3, dtype=np.float32)
    q = np.array([[0.1, 0.9, 0.3]], dtype=np.float32)
    assert ev.dense_rankings(q, docs, ids) == [["b", "c", "a"]]
    texts = ["the moon pulls tides", "cats sleep all day", "tides and the sea"]
    ranked = ev.bm25_rankings(texts, ids, ["tides", "the"], depth=5)
    assert ranked[0][:2] == ["a", "c"] or ranked[0][:2] == ["c", "a"]
    assert "b" not in ranked[0]  # no score, not ranked
    assert ranked[1] == []  # a stopword-only query finds nothing


def test_markdown_table_and_chart():
    res = {
        "chunk": {
            "pass@5": 80.0,
            "pass@10": 85.0,
            "pass@20": 90.5,
            "failure@20": 9.5,
            "mrr@10": 0.7,
            "seconds": 1.0,
            "model_calls": 3,
        }
    }
    md = ev.markdown_table(res, 124)
    assert "| chunk | 80.00 | 85.00 | 90.50 | 9.50 | 0.7000 | 1.0 | 3 |" in md
    assert "90.50" in ev.bar_chart(res)


def test_retrieval_eval_metadata_and_command():
    import dagster as dg

    from situate.assets.retrieval_eval import EvalConfig, eval_command, eval_metadata

    with pytest.raises(dg.Failure, match="SITUATE_EVAL_CORPUS"):
        eval_command(EvalConfig(corpus="", queries=""), "/tmp/x.json")
    cmd = eval_command(EvalConfig(corpus="c.json", queries="q.jsonl", configs="chunk"), "/tmp/x.json")
    here = __import__("os").getcwd()
    assert cmd[-10:] == [
        "--corpus",
        f"{here}/c.json",
        "--json",
        "/tmp/x.json",
        "--fusion",
        "rrf",
        "--queries",
        f"{here}/q.jsonl",
        "--configs",
        "chunk",
    ]
    res = {"chunk": {"pass@5": 80.0, "pass@10": 85.0, "pass@20": 90.5, "failure@20": 9.5, "mrr@10": 0.7}}
    report = {
        "markdown": ev.markdown_table(res, 3),
        "configs": res,
        "n_queries": 3,
        "n_chunks": 9,
        "blurb_quality": {"blurbs": 9},
        "seconds": 1.0,
        "data_folder": "/tmp",
    }
    md = eval_metadata(report)
    assert md["chunk/pass@20"] == 90.5 and md["chunk/failure@20"] == 9.5
    assert "| chunk | 80.00" in md["table"].value


def test_score_from_ranks_is_the_cookbook_score():
    """score_ranks over golden ranks gives score's figures exactly, on random rankings."""
    rng = np.random.default_rng(3)
    for _ in range(40):
        qs, keyed = [], []
        for i in range(int(rng.integers(1, 8))):
            golden = sorted({("d", int(x)) for x in rng.integers(0, 30, int(rng.integers(1, 4)))})
            qs.append(ev.Query(str(i), "q", golden))
            keyed.append([("d", int(x)) for x in rng.permutation(30)[: int(rng.integers(0, 30))]])
        ranks = [ev.golden_ranks(k, q.golden) for k, q in zip(keyed, qs)]
        assert ev.score_ranks(ranks) == ev.score(keyed, qs)
    with pytest.raises(ValueError):
        ev.score_ranks([[1], []])


def test_covering_the_labelled_chunks_themselves_gives_the_labelled_score(tmp_path):
    """The re-chunked corpus's mapping, on the docs set: its spans hold the labelled chunks'
    bytes, and hits that are the labelled chunks themselves are ranked as the labelled keys are."""
    from situate.evaluation.data import corpus_file
    from situate.pipelines.evaluate import rechunked_corpus

    source = corpus_file("docs")
    target, spans = rechunked_corpus(source, tmp_path)
    entries = {e["doc_id"]: e for e in json.loads(source.read_text())}
    assert all(e["chunks"] is None for e in json.loads(target.read_text()))
    assert len(spans) == sum(len(e["chunks"]) for e in entries.values()) == 232
    for (doc_id, index), (_, a, b) in spans.items():
        text = entries[doc_id]["content"].encode()
        labelled = next(c for c in entries[doc_id]["chunks"] if int(c["original_index"]) == index)
        assert text[a:b].decode() == labelled["content"]
    rng = np.random.default_rng(0)
    keys = sorted(spans)
    for _ in range(30):
        ranked = [keys[i] for i in rng.permutation(len(keys))[:20]]
        golden = [keys[i] for i in rng.integers(0, len(keys), 2)]
        by_span = ev.covering_ranks([spans[k] for k in ranked], [spans[g] for g in golden])
        assert by_span == ev.golden_ranks(ranked, golden)
