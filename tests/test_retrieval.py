import numpy as np
import pytest

from situate.resources.store.retrieval import bm25_ids, bm25_search, build_bm25, hybrid_search, rrf


def test_rrf_matches_hand_computed_scores():
    fused = dict(rrf([["a", "b", "c"], ["c", "a"]], k=60))
    assert fused["a"] == pytest.approx(1 / 61 + 1 / 62)
    assert fused["b"] == pytest.approx(1 / 62)
    assert fused["c"] == pytest.approx(1 / 63 + 1 / 61)
    assert [i for i, _ in rrf([["a", "b", "c"], ["c", "a"]])] == ["a", "c", "b"]


def test_rrf_single_list_keeps_order_and_empty_is_empty():
    assert [i for i, _ in rrf([["x", "y", "z"]])] == ["x", "y", "z"]
    assert rrf([[], []]) == []


def test_bm25_index_roundtrip(tmp_path):
    ids = ["d1", "d2", "d3"]
    texts = ["The cat sat on the mat", "Dogs chase cats in the garden", "Quarterly revenue grew 3%"]
    assert build_bm25(ids, texts, tmp_path / "bm25") == 3
    assert bm25_ids(tmp_path / "bm25") == ids
    assert bm25_search(tmp_path / "bm25", "revenue growth", 3)[0] == "d3"
    assert bm25_search(tmp_path / "bm25", "cats", 3)[:2] == ["d1", "d2"] or set(
        bm25_search(tmp_path / "bm25", "cats", 3)[:2]
    ) == {"d1", "d2"}
    assert bm25_search(tmp_path / "bm25", "zebra", 3) == []
    # rebuilding replaces the index whole
    build_bm25(["d9"], ["zebra stripes"], tmp_path / "bm25")
    assert bm25_ids(tmp_path / "bm25") == ["d9"]


def test_bm25_rejects_duplicate_ids(tmp_path):
    with pytest.raises(ValueError):
        build_bm25(["a", "a"], ["x", "y"], tmp_path / "bm25")


def test_hybrid_search_fuses_dense_and_bm25(tmp_path):
    """Real LanceDB and bm25s; FAKE 4-d vectors stand in for the embedder."""
    from situate.contextual.indexing import build_rows
    from situate.resources.store.retrieval import rebuild_bm25_from_table
    from situate.resources.store.store import Store

    store = Store(home=str(tmp_path))
    chunks = [
        {"chunk_id": f"k:{i}:h", "index": i, "text": t, "heading_path": []}
        for i, t in enumerate(["alpha apples", "beta bananas", "gamma grapes"])
    ]
    blurbs = [
        {"chunk_id": c["chunk_id"], "blurb": b, "status": "model"}
        for c, b in zip(chunks, ["fruit list", "", "vineyard notes"])
    ]
    vecs = np.eye(3, 4, dtype=np.float32)
    doc = {"doc_id": "d", "source": "d.md", "title": "D", "sha256": "s"}
    store.replace_document("k", build_rows("k", doc, chunks, blurbs, vecs, "m", "e", "fp"))
    rebuild_bm25_from_table(store)
    hits, warnings = hybrid_search(store, np.array([0, 0, 1, 0], np.float32), "bananas", k=3)
    assert warnings == []
    # dense ranks chunk 2 first, BM25 finds only chunk 1: both lead the fused list
    assert {h.chunk_index for h in hits[:2]} == {1, 2}
    assert [h.rank for h in hits] == [1, 2, 3]
    assert hits[0].score >= hits[1].score >= hits[2].score
    # the blurb is indexed for BM25 too
    hits, _ = hybrid_search(store, np.array([1, 0, 0, 0], np.float32), "vineyard", k=1)
    assert hits[0].chunk_index in (0, 2)


def test_a_misleading_blurb_cannot_push_a_chunk_out_of_every_bm25_list(tmp_path):
    """The index holds a second BM25 over structural context + chunk without the blurb, and
    search fuses it as a third RRF ranking (FAKE 4-d vectors stand in for the embedder)."""
    from situate.contextual.indexing import build_rows
    from situate.resources.store.retrieval import STRUCTURAL, rebuild_bm25_from_table, rrf
    from situate.resources.store.store import Store

    store = Store(home=str(tmp_path))
    texts = ["def rotate_keys(): pass", "def bake(): pass", "def rotate_tyres(): pass"]
    chunks = [{"chunk_id": f"k:{i}:h", "index": i, "text": t, "heading_path": []} for i, t in enumerate(texts)]
    # chunk 0's blurb talks about something else; chunk 1's blurb names rotate_keys
    blurbs = [
        {"chunk_id": c["chunk_id"], "blurb": b, "status": "model"}
        for c, b in zip(chunks, ["This chunk is about bread.", "This chunk calls rotate_keys rotate_keys.", ""])
    ]
    doc = {"doc_id": "d", "source": "d.py", "title": "D", "sha256": "s"}
    store.replace_document("k", build_rows("k", doc, chunks, blurbs, np.eye(3, 4, dtype=np.float32), "m", "e", "fp"))
    rebuild_bm25_from_table(store)
    assert bm25_ids(store.bm25_dir / STRUCTURAL) == bm25_ids(store.bm25_dir) == [c["chunk_id"] for c in chunks]
    assert bm25_search(store.bm25_dir / STRUCTURAL, "bread") == []  # no blurb in the second index
    main, structural = (
        bm25_search(store.bm25_dir, "rotate_keys"),
        bm25_search(store.bm25_dir / STRUCTURAL, "rotate_keys"),
    )
    assert main[0] == "k:1:h" and structural[0] == "k:0:h"
    qv = np.array([0.1, 0.2, 0.3, 0.9], np.float32)
    qv /= np.linalg.norm(qv)  # dense order: chunk 2, 1, 0
    hits, warnings = hybrid_search(store, qv, "rotate_keys", k=3)
    assert warnings == []
    dense = ["k:2:h", "k:1:h", "k:0:h"]
    expected = [i for i, _ in rrf([dense, main, structural])]
    assert [h.chunk_id for h in hits] == expected
    # with two rankings the chunk whose blurb names the query word leads; the third ranking
    # (the chunk's own text) puts the chunk that defines it first
    assert [i for i, _ in rrf([dense, main])][0] == "k:1:h" and expected[0] == "k:0:h"
    # the weighted fusion keeps the cookbook's two rankings
    hits_w, _ = hybrid_search(store, qv, "rotate_keys", k=3, fusion="weighted")
    assert len(hits_w) == 3
    # an index built before the third ranking existed: two rankings and a warning saying what to do
    build_bm25(*zip(*[(h.chunk_id, h.text) for h in hits]), store.bm25_dir)
    hits_old, warnings = hybrid_search(store, qv, "rotate_keys", k=3)
    assert [h.chunk_id for h in hits_old] == [i for i, _ in rrf([dense, bm25_search(store.bm25_dir, "rotate_keys")])]
    assert len(warnings) == 1 and "situate ingest" in warnings[0] and "predates" in warnings[0]


def test_odd_queries_get_answers_not_tracebacks(tmp_path):
    """Stopword-only query, ``k`` above the row count, an empty table (FAKE 4-d vectors)."""
    from situate.contextual.indexing import build_rows
    from situate.resources.store.retrieval import rebuild_bm25_from_table
    from situate.resources.store.store import Store

    empty = Store(home=str(tmp_path / "empty"))
    hits, warnings = hybrid_search(empty, np.ones(4, np.float32) / 2, "anything", k=5)
    assert hits == [] and "empty" in warnings[0]
    store = Store(home=str(tmp_path / "full"))
    chunks = [
        {"chunk_id": f"k:{i}:h", "index": i, "text": t, "heading_path": []}
        for i, t in enumerate(["alpha apples", "beta bananas", "gamma grapes"])
    ]
    blurbs = [{"chunk_id": c["chunk_id"], "blurb": "", "status": "model"} for c in chunks]
    doc = {"doc_id": "d", "source": "d.md", "title": "D", "sha256": "s"}
    store.replace_document("k", build_rows("k", doc, chunks, blurbs, np.eye(3, 4, dtype=np.float32), "m", "e", "fp"))
    rebuild_bm25_from_table(store)
    hits, warnings = hybrid_search(store, np.array([0, 1, 0, 0], np.float32), "the of and", k=2)
    assert hits[0].chunk_index == 1 and len(hits) == 2
    assert any("no BM25 terms" in w for w in warnings)
    hits, warnings = hybrid_search(store, np.array([0, 1, 0, 0], np.float32), "bananas", k=1000)
    assert sorted(h.chunk_index for h in hits) == [0, 1, 2] and warnings == []
    long_query = "bananas " * 20000
    hits, _ = hybrid_search(store, np.array([0, 1, 0, 0], np.float32), long_query, k=1)
    assert hits[0].chunk_index == 1


@pytest.mark.parametrize(
    "query,k,message", [("", 10, "empty query"), ("   \n\t", 10, "empty query"), ("apples", 0, "-k must be at least 1")]
)
def test_search_cli_refuses_empty_queries_and_bad_k_in_one_line(tmp_path, capsys, query, k, message):
    from situate.pipelines.cli import main

    assert main(["search", query, "-k", str(k), "--home", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]


class FakeReranker:
    """FAKE cross-encoder: scores a passage by how often the query's first word occurs in it."""

    def score(self, query, passages):
        import numpy as np

        word = query.split()[0]
        return np.array([p.count(word) for p in passages], dtype=np.float32)


def test_rerank_hits_reorders_only_the_head():
    from situate.resources.models.reranker import rerank_hits
    from situate.resources.store.retrieval import Hit

    hits = [
        Hit(i + 1, 1.0 / (i + 1), f"c{i}", "d", "s", i, "", t, "")
        for i, t in enumerate(["x", "tide", "tide tide", "tide tide tide"])
    ]
    out = rerank_hits(FakeReranker(), "tide rises", hits, depth=3, fusion="replace")
    assert [h.chunk_id for h in out] == ["c2", "c1", "c0", "c3"]
    assert [h.rank for h in out] == [1, 2, 3, 4] and out[0].score == 2.0 and out[0].rerank_score == 2.0
    assert out[3].rerank_score is None  # below the depth: not scored, order kept

    # the default fuses the two orders: first stage c0,c1,c2 (ranks 1,2,3), cross-encoder c2,c1,c0.
    # c1: 1/62 + 1/62 = 0.032258; c0 and c2: 1/61 + 1/63 = 0.032266 each, the tie going to the
    # first stage's order, so c0, c2, c1.
    fused = rerank_hits(FakeReranker(), "tide rises", hits, depth=3)
    assert [h.chunk_id for h in fused] == ["c0", "c2", "c1", "c3"]
    assert fused[0].score == round(1 / 61 + 1 / 63, 6) and fused[2].score == round(2 / 62, 6)
    assert [h.rerank_score for h in fused] == [0.0, 2.0, 1.0, None]
    # what decided each place is in the hit: the two ranks whose RRF is its score
    assert [(h.first_stage_rank, h.rerank_rank) for h in fused] == [(1, 3), (3, 1), (2, 2), (None, None)]
    assert all(h.score == round(1 / (60 + h.first_stage_rank) + 1 / (60 + h.rerank_rank), 6) for h in fused[:3])


def test_rerank_order_fuses_ranks_by_rrf():
    from situate.resources.models.reranker import rerank_order

    # the cross-encoder puts the first stage's 5th first: fused, it rises to 3rd.  Fused scores:
    # 1st 1/61 + 1/62 = 0.03252, 2nd 1/62 + 1/63 = 0.03200, 5th 1/65 + 1/61 = 0.03178,
    # 3rd 1/63 + 1/64 = 0.03150, 4th 1/64 + 1/65 = 0.03101
    scores = [3.0, 1.0, 0.5, 0.2, 9.0]
    assert [p for p, _ in rerank_order(scores, "rrf")] == [0, 1, 4, 2, 3]
    assert [p for p, _ in rerank_order(scores, "replace")] == [4, 0, 1, 2, 3]
    assert rerank_order([], "rrf") == []
    with pytest.raises(ValueError, match="unknown rerank fusion 'max'"):
        rerank_order(scores, "max")


def test_real_reranker_prefers_the_relevant_passage():
    from conftest import models_present

    if not models_present():
        pytest.skip("models not installed")
    from situate.pipelines.settings import reranker_from_env

    s = reranker_from_env().score(
        "what causes ocean tides",
        [
            "The gravity of the Moon and the Sun raises the tides of the oceans.",
            "A cat slept on the warm windowsill all afternoon.",
        ],
    )
    assert s.shape == (2,) and s[0] > s[1] + 5


def test_bm25_finds_chinese_text_with_a_chinese_query(tmp_path):
    """CJK has no spaces between words: each character is a token, so a query shares terms."""
    ids = ["zh-ml", "zh-food", "en", "mixed"]
    texts = [
        "机器学习模型需要大量的训练数据。",
        "北京烤鸭是一道有名的菜。",
        "Machine learning models need training data.",
        "دليل المستخدم — emoji 🚀 and RTL text",
    ]
    build_bm25(ids, texts, tmp_path / "bm25")
    assert bm25_search(tmp_path / "bm25", "训练数据", 2)[0] == "zh-ml"
    assert bm25_search(tmp_path / "bm25", "烤鸭", 2) == ["zh-food"]
    assert bm25_search(tmp_path / "bm25", "training data", 2)[0] == "en"
    assert bm25_search(tmp_path / "bm25", "المستخدم", 2) == ["mixed"]


@pytest.mark.parametrize(
    "argv,message",
    [
        (["search", "apples", "--rerank", "abc"], "argument --rerank: invalid int value: 'abc'"),
        (["search", "apples", "-k", "ten"], "argument -k: invalid int value: 'ten'"),
        ([], "the following arguments are required: command"),
    ],
)
def test_unparseable_arguments_get_one_line(capsys, argv, message):
    from situate.pipelines.cli import main

    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("situate: error: ") and message in err[0]


class RecordingFakeReranker:
    """FAKE cross-encoder: records the passages it is given, scores them by length."""

    def __init__(self):
        self.passages = []

    def score(self, query, passages):
        import numpy as np

        self.passages += list(passages)
        return np.array([len(p) for p in passages], dtype=np.float32)


def test_the_cross_encoder_reads_context_and_chunk_not_the_blurb():
    from situate.resources.models.reranker import rerank_hits, rerank_passage
    from situate.resources.store.retrieval import Hit

    hits = [
        Hit(1, 0.03, "c0", "d", "s", 0, "A made-up blurb.", "x = 1", "function f"),
        Hit(2, 0.02, "c1", "d", "s", 1, "", "y = 2", ""),
    ]
    fake = RecordingFakeReranker()
    rerank_hits(fake, "what sets x", hits, depth=2)
    assert fake.passages == ["function f\n\nx = 1", "y = 2"]
    assert (
        rerank_passage("x = 1", "function f", "A made-up blurb.", with_blurb=True)
        == "function f\nA made-up blurb.\n\nx = 1"
    )


def test_split_identifiers_adds_the_words_of_compound_names_and_keeps_the_name():
    from situate.resources.store.retrieval import split_identifiers, tokenize

    assert split_identifiers("struct FrameTimer") == "struct FrameTimer Frame Timer"
    assert split_identifiers("fn reset_hasher(&mut self)") == "fn reset_hasher reset hasher(&mut self)"
    assert split_identifiers("HTTPServer getHTTPResponseCode") == (
        "HTTPServer HTTP Server getHTTPResponseCode get HTTP Response Code"
    )
    # plain words, single-word names, dunder names and version-like tokens are left alone
    for plain in ("reset the hasher", "__init__ _private", "utf8 v2 x"):
        assert split_identifiers(plain) == plain
    # a question's words now meet the name; without the option they do not
    words = set(tokenize(["reset the hasher"]).vocab)
    assert words <= set(tokenize(["fn reset_hasher(&mut self)"], identifiers=True).vocab)
    assert not words <= set(tokenize(["fn reset_hasher(&mut self)"]).vocab)


def test_split_identifiers_reads_a_long_word_in_one_pass():
    # a minified or encoded blob is one long name: the split leaves it whole (a backtracking pattern
    # took 47 s on 40,000 letters; 200,000 would take about 20 min)
    from situate.resources.store.retrieval import split_identifiers

    blob = "a" * 200_000
    assert split_identifiers(blob) == blob
    assert split_identifiers(blob + "B") == f"{blob}B {blob} B"
    assert split_identifiers("x_" + blob) == f"x_{blob} x {blob}"


def test_each_kind_of_chunk_is_fused_by_its_own_fusion():
    from situate.resources.store.fusion import FUSION_BY_KIND, Candidates, KindFusion, fuse_by_kind, kind_scores

    # code: cosine + 0.05 × structural BM25 / its best (the fitted score fusion); prose: RRF, equal weights, k = 60
    assert FUSION_BY_KIND["code"] == KindFusion("score", (1.0, 0.0, 0.05))
    assert FUSION_BY_KIND["prose"] == KindFusion("rrf", (1.0, 1.0, 1.0), 60)
    inf = np.inf
    ids = ["c1", "c2", "p1", "p2"]
    ranks = np.array([[1, 2, 3, inf], [inf, 1, 2, 3], [inf, 1, 2, 3]])  # dense, BM25, structural BM25
    scores = np.array([[0.80, 0.78, 0.60, 0.10], [0, 6.0, 3.0, 1.5], [0, 4.0, 2.0, 1.0]])
    code = kind_scores(FUSION_BY_KIND["code"], ranks, scores)
    assert code == pytest.approx([0.80, 0.78 + 0.05, 0.60 + 0.025, 0.10 + 0.0125])  # BM25 over its best, 4.0
    prose = kind_scores(FUSION_BY_KIND["prose"], ranks, scores)
    assert prose == pytest.approx([1 / 61, 1 / 62 + 2 / 61, 1 / 63 + 2 / 62, 2 / 63])
    # each chunk at the position its own kind's fusion gives it among all four: c2 1st and c1 2nd
    # by code's; p1 2nd and p2 3rd by prose's (c2 1st there too); c1 and p1 both 2nd: the candidate
    # order; scored 61 / (60 + place in the order), so no two share a score
    got = fuse_by_kind(Candidates(ids, ranks, scores), {"c1": "code", "c2": "code", "p1": "prose", "p2": "prose"})
    assert [i for i, _ in got] == ["c2", "c1", "p1", "p2"]
    assert [s for _, s in got] == pytest.approx([1, 61 / 62, 61 / 63, 61 / 64])
    # a code chunk the embedder is sure of keeps its place against a BM25 match: 0.05 of BM25 cannot
    # close a cosine gap of 0.2, where k = 10 rank fusion put the BM25 match first
    sure = Candidates(["a", "b"], np.array([[1, 2], [inf, 1], [inf, 1]]), np.array([[0.9, 0.7], [0, 9.0], [0, 9.0]]))
    assert [i for i, _ in fuse_by_kind(sure, {"a": "code", "b": "code"})] == ["a", "b"]
    rrf10 = KindFusion("rrf", (2.0, 0.0, 1.0), 10)
    assert [i for i, _ in fuse_by_kind(sure, {"a": "code", "b": "code"}, {"code": rrf10, "prose": rrf10})] == ["b", "a"]
    # no kind known: prose, i.e. rrf's order
    lists = [["c1", "c2", "p1"], ["c2", "p1", "p2"], ["c2", "p1", "p2"]]
    assert [i for i, _ in fuse_by_kind(Candidates(ids, ranks, scores), {})] == [i for i, _ in rrf(lists)]


def test_a_folder_of_code_and_prose_keeps_each_chunks_kind_with_its_index(tmp_path):
    """Real LanceDB and bm25s; FAKE 4-d vectors stand in for the embedder."""
    from situate.resources.store.fusion import FUSION_BY_KIND, fuse_by_kind, kind_scores
    from situate.resources.store.retrieval import (
        STRUCTURAL,
        bm25_kinds,
        bm25_lists,
        candidates_of,
        dense_scored,
        read_cosines_where_needed,
    )
    from situate.resources.store.store import Store

    store = Store(home=str(tmp_path))
    docs = {
        "a.py": ({"format": "code", "text": "def rotate_keys():\n    pass\n"}, ["def rotate_keys():\n    pass\n"]),
        "b.md": (
            {"format": "markdown", "text": "# Keys\n\nRotate keys yearly."},
            ["Rotate keys yearly.", "Bake bread."],
        ),
    }
    _write_unit_vectors(store, docs)
    assert bm25_kinds(store.bm25_dir) == {"a.py:0:h": "code", "b.md:0:h": "prose", "b.md:1:h": "prose"}
    qv = np.array([0.2, 0.3, 0.9, 0.1], np.float32)
    qv /= np.linalg.norm(qv)  # dense order: b.md:1, b.md:0, a.py:0
    hits, warnings = hybrid_search(store, qv, "rotate keys", k=3)
    assert warnings == []
    dense = ["b.md:1:h", "b.md:0:h", "a.py:0:h"]
    table = store.table()
    scored = dense_scored(table, qv, 150)
    assert [c for c, _ in scored] == dense and scored[0][1] == pytest.approx(float(qv[2]))  # cosine with e_2
    cands = candidates_of(table, qv, scored, bm25_lists(store, table, "rotate keys", 150, "rrf", []))
    assert [h.chunk_id for h in hits] == [i for i, _ in fuse_by_kind(cands, bm25_kinds(store.bm25_dir))]
    # the code chunk's place is the one code's fusion gives it among all three
    code_order = [cands.ids[i] for i in np.argsort(-kind_scores(FUSION_BY_KIND["code"], cands.ranks, cands.scores))]
    assert [h.chunk_id for h in hits].index("a.py:0:h") == code_order.index("a.py:0:h")
    # a code chunk dense did not return (top 1 only) gets its own cosine once a score fusion needs it
    sparse = bm25_lists(store, table, "rotate_keys", 150, "rrf", [])
    few = candidates_of(table, qv, dense_scored(table, qv, 1), sparse, cosines=False)
    a = few.ids.index("a.py:0:h")
    assert few.scores[0][a] == -1.0 and np.isinf(few.ranks[0][a])
    assert read_cosines_where_needed(table, qv, few, bm25_kinds(store.bm25_dir), keep=3) == 1
    assert few.scores[0][a] == pytest.approx(float(qv[0]))  # its vector is e_0
    # an index written before kinds were kept: every chunk fused as before (rrf, equal weights)
    (store.bm25_dir / "kinds.json").unlink()
    build_bm25([h.chunk_id for h in hits], [h.text for h in hits], store.bm25_dir, [h.text for h in hits])
    assert bm25_kinds(store.bm25_dir) is None
    hits, _ = hybrid_search(store, qv, "rotate keys", k=3)
    lists = [dense, bm25_search(store.bm25_dir, "rotate keys"), bm25_search(store.bm25_dir / STRUCTURAL, "rotate keys")]
    assert [h.chunk_id for h in hits] == [i for i, _ in rrf(lists)]


def test_a_mixed_folders_first_hits_use_every_code_chunks_own_cosine(tmp_path):
    """Real LanceDB and bm25s; FAKE 8-d vectors with chosen cosines stand in for the embedder.  Prose
    chunks near the query, code chunks that match its words but lie far from it: a code chunk outside
    the dense top list starts with a bound on its cosine, and the merged first hit must not rest on it
    (found by a break-it review: the code chunk of cosine -0.5 came first)."""
    from situate.contextual.indexing import build_rows
    from situate.resources.store.fusion import fuse_by_kind
    from situate.resources.store.retrieval import (
        bm25_kinds,
        bm25_lists,
        candidates_of,
        dense_scored,
        rebuild_bm25_from_table,
    )
    from situate.resources.store.store import Store

    def vec(cos, j):
        v = np.zeros(8, np.float32)
        v[0], v[j] = cos, np.sqrt(1 - cos * cos)
        return v

    store = Store(home=str(tmp_path))
    docs = {
        "p.md": ("markdown", ["Bake bread daily.", "Walk dogs often.", "Paint walls white."], [0.9, 0.8, 0.3]),
        "c.py": (
            "code",
            [
                "def rotate_keys():\n    rotate keys rotate keys rotate keys\n",
                "def a():\n    rotate keys\n",
                "def b():\n    keys of the rotation table here and more words\n",
            ],
            [-0.5, 0.2, 0.0],
        ),
    }
    j = 1
    for name, (fmt, texts, cosines) in docs.items():
        doc = {"format": fmt, "text": "\n".join(texts), "doc_id": name, "source": name, "title": name, "sha256": name}
        chunks = [{"chunk_id": f"{name}:{i}:h", "index": i, "text": t, "heading_path": []} for i, t in enumerate(texts)]
        blurbs = [{"chunk_id": c["chunk_id"], "blurb": "", "status": "model"} for c in chunks]
        vecs = np.stack([vec(c, j + i) for i, c in enumerate(cosines)])
        j += len(texts)
        store.replace_document(name, build_rows(name, doc, chunks, blurbs, vecs, "m", "e", "fp"))
    rebuild_bm25_from_table(store)
    q = np.zeros(8, np.float32)
    q[0] = 1
    table = store.table()
    sparse = bm25_lists(store, table, "rotate keys", 3, "rrf", [])
    exact = fuse_by_kind(candidates_of(table, q, dense_scored(table, q, 3), sparse), bm25_kinds(store.bm25_dir))
    for k in (1, 2, 3):
        hits, _ = hybrid_search(store, q, "rotate keys", k=k, candidates=3)
        assert [h.chunk_id for h in hits] == [i for i, _ in exact[:k]]
    assert exact[0][0] == "p.md:0:h"


@pytest.mark.parametrize("name", ["kinds.json", "ids.json"])
def test_a_deeply_nested_index_file_is_read_as_a_damaged_index(tmp_path, monkeypatch, name):
    """Real LanceDB and bm25s; FAKE 4-d vectors stand in for the embedder.  JSON nested 100,000
    deep (RecursionError in json.loads) is a damaged file: no index, search warns and answers from
    the dense ranking, and rebuilding from the table brings the index back."""
    from situate.contextual.indexing import build_rows
    from situate.contextual.table_checks import ids_match
    from situate.resources.store import retrieval
    from situate.resources.store.retrieval import bm25_kinds, bm25_scores, rebuild_bm25_from_table
    from situate.resources.store.store import Store

    store = Store(home=str(tmp_path))
    chunks = [
        {"chunk_id": f"k:{i}:h", "index": i, "text": t, "heading_path": []} for i, t in enumerate(["alpha", "beta"])
    ]
    blurbs = [{"chunk_id": c["chunk_id"], "blurb": "", "status": "model"} for c in chunks]
    doc = {"doc_id": "d", "source": "d.md", "title": "D", "sha256": "s", "format": "markdown", "text": "alpha beta"}
    store.replace_document("k", build_rows("k", doc, chunks, blurbs, np.eye(2, 4, dtype=np.float32), "m", "e", "fp"))
    rebuild_bm25_from_table(store)
    assert bm25_kinds(store.bm25_dir) == {"k:0:h": "prose", "k:1:h": "prose"}
    (store.bm25_dir / name).write_text("[" * 100_000 + "]" * 100_000)
    monkeypatch.setattr(retrieval, "_LOADED", {})  # a new process (CLI, service) reads the files again
    assert bm25_ids(store.bm25_dir) is None and bm25_kinds(store.bm25_dir) is None
    assert bm25_scores(store.bm25_dir, "beta") is None
    hits, warnings = hybrid_search(store, np.array([0, 1, 0, 0], np.float32), "beta", k=2)
    assert [h.chunk_id for h in hits] == ["k:1:h", "k:0:h"]
    assert len(warnings) == 1 and warnings[0].startswith("no readable BM25 index: dense results only")
    assert ids_match(store)[0] is False  # what makes the next ingest rebuild it
    rebuild_bm25_from_table(store)
    assert bm25_ids(store.bm25_dir) == ["k:0:h", "k:1:h"] and ids_match(store)[0] is True


def test_an_ids_json_that_is_not_a_list_of_ids_is_a_damaged_index(tmp_path):
    build_bm25(["d1", "d2"], ["cats", "dogs"], tmp_path / "bm25", kinds=["prose", "code"])
    for bad in ("7", '{"d1": 0}', '["d1", 2]'):
        (tmp_path / "bm25" / "ids.json").write_text(bad)
        assert bm25_ids(tmp_path / "bm25") is None


def test_code_chunks_are_ranked_by_the_code_query_vector_and_prose_as_before(tmp_path):
    """Real LanceDB and bm25s; FAKE 4-d vectors stand in for the embedder and its code map.  Code
    chunks are compared with the code vector, prose with the plain one; with few dense candidates
    the first hits equal the fusion of every candidate's exact own-kind cosine."""
    from situate.resources.store.fusion import fuse_by_kind
    from situate.resources.store.retrieval import (
        bm25_kinds,
        bm25_lists,
        candidates_of,
        dense_by_kind,
        kind_cosines,
    )
    from situate.resources.store.store import Store

    store = Store(home=str(tmp_path))
    docs = {
        "a.py": ("code", ["def load():\n    pass\n", "def save():\n    pass\n"]),
        "b.md": ("markdown", ["Keys.", "Bread."]),
    }
    _write_unit_vectors(store, {n: ({"format": f, "text": "\n".join(t)}, t) for n, (f, t) in docs.items()})
    qv = np.array([0.8, 0.1, 0.5, 0.3], np.float32) / np.linalg.norm([0.8, 0.1, 0.5, 0.3])
    cv = np.array([0.05, 0.95, 0.2, 0.3], np.float32) / np.linalg.norm([0.05, 0.95, 0.2, 0.3])
    order = lambda hits, ext: [h.chunk_id for h in hits if h.chunk_id.startswith(ext)]  # noqa: E731
    plain, _ = hybrid_search(store, qv, "zzz", k=4)
    mapped, _ = hybrid_search(store, qv, "zzz", k=4, code_vector=cv)
    assert order(plain, "a.py") == ["a.py:0:h", "a.py:1:h"] and order(mapped, "a.py") == ["a.py:1:h", "a.py:0:h"]
    assert order(plain, "b.md") == order(mapped, "b.md") == ["b.md:0:h", "b.md:1:h"]
    assert [h.similarity for h in mapped if h.chunk_id == "a.py:1:h"] == [pytest.approx(float(qv[1]), abs=1e-4)]
    table, kinds = store.table(), bm25_kinds(store.bm25_dir)
    for query in ("zzz", "load keys"):  # "load": a code chunk far from the code vector, found by BM25
        for k in (1, 2):  # one dense candidate of each kind (k 2: two), the rest from bounds and reads
            dense, ranks = dense_by_kind(table, qv, cv, kinds, k)
            cands = candidates_of(table, qv, dense, bm25_lists(store, table, query, k, "rrf", []), False, ranks)
            exact = kind_cosines(table, qv, cv, cands.ids, kinds)
            cands.scores[0] = [exact[i] for i in cands.ids]
            hits, _ = hybrid_search(store, qv, query, k=k, candidates=1, code_vector=cv)
            assert [h.chunk_id for h in hits] == [i for i, _ in fuse_by_kind(cands, kinds)][:k]


def _write_unit_vectors(store, docs: dict) -> None:
    """Write ``docs`` (name → (document fields, chunk texts)) to ``store``, the i-th chunk of all
    with the FAKE vector e_i (4-d), and build the BM25 index with each chunk's kind."""
    from situate.contextual.indexing import build_rows
    from situate.resources.store.retrieval import rebuild_bm25_from_table

    row = 0
    for name, (doc, texts) in docs.items():
        doc = doc | {"doc_id": name, "source": name, "title": name, "sha256": name}
        chunks = [{"chunk_id": f"{name}:{i}:h", "index": i, "text": t, "heading_path": []} for i, t in enumerate(texts)]
        blurbs = [{"chunk_id": c["chunk_id"], "blurb": "", "status": "model"} for c in chunks]
        vecs = np.eye(4, dtype=np.float32)[row : row + len(texts)]
        row += len(texts)
        store.replace_document(name, build_rows(name, doc, chunks, blurbs, vecs, "m", "e", "fp"))
    rebuild_bm25_from_table(store)
