"""What keeps a document's cost flat over a large ingest: a group of documents committed to the
table (and the embedding cache) at once, a bad document still failing alone, and progress lines
that do not grow with the documents (each is an event in Dagster's storage)."""

import doctest
import logging

import numpy as np
import pyarrow as pa
import pytest
from test_store_and_sync import rows

import situate.assets.per_document as per_document
import situate.contextual.policy
import situate.contextual.stage_runs
from situate.resources.documents.reading import DocumentError
from situate.resources.store.cache import EmbeddingCache, embed_group
from situate.resources.store.store import Store


def test_the_examples_hold():
    for m in (situate.contextual.stage_runs, situate.contextual.policy):
        assert doctest.testmod(m).failed == 0, m.__name__


def test_a_group_of_documents_is_one_commit_and_leaves_no_stale_rows(tmp_path):
    store = Store(home=str(tmp_path))
    store.replace_document("a", rows("a", ["old a one", "old a two"]))
    store.replace_document("z", rows("z", ["untouched"]))
    version = store.table().version
    written = store.replace_documents(
        {"a": rows("a", ["new a"]), "b": rows("b", ["b one", "b two"]), "c": rows("c", ["c one"])}
    )
    assert written == {"a": 1, "b": 2, "c": 1}
    table = store.table()
    assert table.version == version + 1  # one commit for the three documents
    texts = sorted(table.search().select(["text"]).limit(None).to_arrow().column("text").to_pylist())
    assert texts == ["b one", "b two", "c one", "new a", "untouched"]
    # a document with no rows left loses its rows in the same kind of commit
    store.replace_documents({"b": rows("b", []), "c": rows("c", ["c one"])})
    assert sorted(store.document_states()) == ["a", "c", "z"]


def test_a_group_refuses_rows_of_another_document(tmp_path):
    store = Store(home=str(tmp_path))
    with pytest.raises(ValueError, match="b: rows belong to other documents"):
        store.replace_documents({"a": rows("a", ["x"]), "b": rows("a", ["y"])})
    with pytest.raises(ValueError, match="a: duplicate chunk ids"):
        twice = pa.concat_tables([rows("a", ["x"]), rows("a", ["x"])])
        store.replace_documents({"a": twice, "b": rows("b", ["y"])})


class FakeContext:
    """A FAKE Dagster context: the run's partition keys and a logger, nothing else."""

    has_partition_key_range = True
    has_partition_key = False

    def __init__(self, keys):
        self.partition_keys = keys
        self.log = logging.getLogger("fake-run")

    @property
    def run(self):
        raise RuntimeError("no run")


def test_a_bad_document_fails_alone_inside_a_group(tmp_path, monkeypatch, caplog):
    """``for_each_group``: a document whose preparation raises is named and left out; when the
    group's commit fails, each document is committed alone, so only the one at fault fails."""
    monkeypatch.setattr(situate.contextual.stage_runs, "GROUP_DOCUMENTS", 3)
    store = Store(home=str(tmp_path))
    keys = ["a", "b", "c", "d", "e"]
    commits = []

    def prepare(key):
        if key == "b":
            raise DocumentError("b.md", "binary content")
        return key.upper()

    def commit(group):
        commits.append(sorted(group))
        if "D" in group.values():
            raise RuntimeError("d cannot be written")
        return {k: {"value": v} for k, v in group.items()}

    with caplog.at_level(logging.INFO, logger="fake-run"):
        report = per_document.for_each_group(FakeContext(keys), store, "embeddings", prepare, commit)
    assert report.ok == {"a": {"value": "A"}, "c": {"value": "C"}, "e": {"value": "E"}}
    assert report.failed == {"b": "b.md: binary content", "d": "RuntimeError: d cannot be written"}
    # groups [a b c] and [d e]: one commit each, then d and e alone after their group failed
    assert commits == [["a", "c"], ["d", "e"], ["d"], ["e"]]
    assert store.read_stage("b", "embeddings")["bad_input"] is True
    assert "d cannot be written" in store.read_stage("d", "embeddings")["error"]
    progress = [r.message for r in caplog.records if "documents" in r.message and r.levelno == logging.INFO]
    assert progress[0].startswith("embeddings: 3/5 documents") and progress[-1].startswith("embeddings: 5/5")


def test_a_group_is_embedded_with_one_cache_lookup_and_one_cache_write(tmp_path, monkeypatch):
    """The embedding cache of a group: one look-up, one write, a text shared by two documents
    embedded once, and a text cached earlier not embedded again (a FAKE embedder)."""

    class FakeEmbedder:
        document_prefix = "doc: "
        calls: list = []

        def embed(self, texts, prefix):
            self.calls.append(list(texts))
            return np.array([[len(t), 1.0] for t in texts], np.float32), sum(len(t) > 6 for t in texts)

    cache = EmbeddingCache(str(tmp_path), model_key="fake")
    cache.put(["cached"], np.array([[9.0, 9.0]], np.float32))
    gets, puts = [], []
    monkeypatch.setattr(cache, "get", lambda texts, f=cache.get: gets.append(len(texts)) or f(texts))
    monkeypatch.setattr(cache, "put", lambda texts, v, f=cache.put: puts.append(list(texts)) or f(texts, v))
    emb = FakeEmbedder()
    out = embed_group(emb, {"a": ["shared", "cached"], "b": ["shared", "longer text"], "c": []}, cache)
    assert gets == [4] and puts == [["shared", "longer text"]]
    assert emb.calls == [["shared"], ["longer text"]]
    assert out["a"][0].tolist() == [[6.0, 1.0], [9.0, 9.0]] and out["a"][1:3] == (1, 0)
    assert out["b"][0].tolist() == [[6.0, 1.0], [11.0, 1.0]] and out["b"][1:3] == (1, 1)
    assert out["c"][0].shape == (0, 0)


def test_the_context_policy_report_is_what_its_command_makes(tmp_path):
    """``benchmarks/context_policy.py`` re-made from the committed per-query reports gives the
    committed report (the per-kind default's evidence), and its choice is the default's."""
    import json
    import sys

    from conftest import REPO

    sys.path.insert(0, str(REPO))
    from benchmarks.context_policy import main

    ab = REPO / "benchmarks" / "reports" / "llm-context-ab"
    out = tmp_path / "policy"
    main(
        ["--code", str(ab / "codebase-structure.json"), str(ab / "codebase-document.json")]
        + ["--prose", str(ab / "docs-structure.json"), str(ab / "docs-document.json"), "--out", str(out)]
    )
    made = json.loads((tmp_path / "policy.json").read_text())
    committed = json.loads((REPO / "benchmarks" / "reports" / "context-policy.json").read_text())
    strip = lambda rows: [{k: v for k, v in r.items() if k != "reports"} for r in rows]  # noqa: E731
    assert strip(made) == strip(committed)
    from situate.resources.models.llm import BlurbLLM

    default = BlurbLLM(model_path="unused.gguf")
    assert {r["kind"]: r["choice"] for r in made} == {"code": default.code_context, "prose": default.context}
