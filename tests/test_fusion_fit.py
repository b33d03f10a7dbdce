"""The fusion fitted by cross-validation (situate/evaluation/fusion_fit.py): its Pass@k equals fusing the
lists for real, and its out-of-fold figure does not flatter a fusion found by searching noise."""

import random

import numpy as np
import pytest

from situate.evaluation import fusion_fit as ff
from situate.evaluation.metrics import pass_at_k


def _random_case(n_queries=40, seed=1):
    rng = random.Random(seed)
    keys = [("d", i) for i in range(60)]
    rankings = {n: [rng.sample(keys, rng.randint(5, 50)) for _ in range(n_queries)] for n in "abc"}
    golden = [rng.sample(keys, rng.randint(1, 3)) for _ in range(n_queries)]
    return rankings, golden


def _fused(rankings, q, fusion):
    """Weighted RRF the plain way, ties in first-seen order (as situate.resources.store.retrieval.rrf)."""
    scores, seen = {}, {}
    for name, w in zip(rankings, fusion.weights):
        for rank, key in enumerate(rankings[name][q], start=1):
            seen.setdefault(key, len(seen))
            scores[key] = scores.get(key, 0.0) + w / (fusion.k + rank)
    return sorted((k for k, s in scores.items() if s > 0), key=lambda k: (-scores[k], seen[k]))


@pytest.mark.parametrize(
    "fusion", [ff.Fusion((1.0, 1.0, 1.0), 60), ff.Fusion((2.0, 0.0, 1.0), 10), ff.Fusion((0.0, 1.0, 0.0), 60)]
)
def test_pass_at_k_equals_fusing_the_lists(fusion):
    rankings, golden = _random_case()
    got = ff.per_query_pass([fusion], ff.prepare(rankings, golden))[0]
    want = np.array([[pass_at_k(_fused(rankings, q, fusion), golden[q], k) for k in ff.KS] for q in range(len(golden))])
    assert got.shape == (40, 3)
    assert np.array_equal(got, want)
    assert 0 < got.mean() < 1  # the case is neither all hits nor all misses


def test_equal_weights_k60_is_todays_rrf():
    from situate.resources.store.retrieval import rrf

    rankings, golden = _random_case(n_queries=10, seed=3)
    got = ff.per_query_pass([ff.Fusion((1.0, 1.0, 1.0), 60)], ff.prepare(rankings, golden))[0]
    for q in range(10):
        order = [k for k, _ in rrf([rankings[n][q] for n in "abc"])]
        assert got[q, 2] == pass_at_k(order, golden[q], 20)


def test_a_ranking_that_finds_every_golden_chunk_is_chosen_and_wins():
    rankings, golden = _random_case(n_queries=50, seed=5)
    # "d" puts each query's golden chunks first; the baseline fuses only the noise
    rankings["good"] = [list(g) + [k for k in rankings["a"][q] if k not in g] for q, g in enumerate(golden)]
    cv = ff.fit_report(rankings, golden, {"a": 1, "b": 1, "c": 1}, folds=5, repeats=3)
    assert cv["alone"]["good"]["pass@5"] == 100.0
    assert cv["pass@5"] == 100.0 and cv["gain@5"] > 50
    assert cv["wins"] is True
    assert all("good×" in d for d in cv["chosen"])
    # weight 1 for all four, k = 60: the good ranking lifts most queries and never sinks one
    e = cv["equal"]
    assert e["fusion"] == "a×1 + b×1 + c×1 + good×1 (k=60)"
    assert e["improved"] > 25 and e["worsened"] == 0 and e["gain@5"] > 0


def test_noise_found_by_searching_does_not_win_out_of_fold():
    rankings, golden = _random_case(n_queries=60, seed=7)
    cv = ff.fit_report(rankings, golden, {"a": 1, "b": 1, "c": 1}, folds=5, repeats=5)
    # searching 52 fusions of noise finds one that looks better on the queries it was chosen on...
    assert cv["in_sample"]["pass@20"] > cv["baseline@20"]
    # ...which the out-of-fold figure does not carry, nor the rule adopt
    assert cv["pass@20"] < cv["in_sample"]["pass@20"]
    assert cv["wins"] is False
    assert cv["space"] == 2 * (3**3 - 1)


def test_the_baseline_is_kept_on_a_tie():
    rankings = {"a": [[("d", 0), ("d", 1)]] * 6, "b": [[("d", 0), ("d", 1)]] * 6}
    golden = [[("d", 0)]] * 6
    cv = ff.fit_report(rankings, golden, {"a": 1, "b": 1}, folds=3, repeats=2)
    assert cv["chosen"] == {"a×1 + b×1 (k=60)": 6}
    assert cv["gain@20"] == 0.0 and cv["wins"] is False


def test_bad_inputs_are_refused_with_the_reason():
    with pytest.raises(ValueError, match="no rankings"):
        ff.prepare({}, [[("d", 0)]])
    with pytest.raises(ValueError, match="ranking 'a' has 1 queries, the golden list 2"):
        ff.prepare({"a": [[("d", 0)]]}, [[("d", 0)], [("d", 1)]])
    with pytest.raises(ValueError, match="baseline ranking 'z'"):
        ff.fit_report({"a": [[("d", 0)]] * 4}, [[("d", 0)]] * 4, {"z": 1})
    with pytest.raises(ValueError, match="3 queries cannot be cut into 5 folds"):
        ff.fit_report({"a": [[("d", 0)]] * 3}, [[("d", 0)]] * 3, {"a": 1}, folds=5)


def test_queries_with_several_golden_chunks_are_reported_apart():
    rankings, golden = _random_case(n_queries=30, seed=11)
    multi = [q for q, g in enumerate(golden) if len(set(g)) > 1]
    cv = ff.fit_report(rankings, golden, {"a": 1, "b": 1, "c": 1}, folds=3, repeats=1)
    assert cv["multi_chunk"]["queries"] == len(multi) > 0
    base = ff.per_query_pass([ff.Fusion((1.0, 1.0, 1.0), 60)], ff.prepare(rankings, golden))[0]
    assert cv["multi_chunk"]["baseline@20"] == round(100 * float(np.mean([base[q, 2] for q in multi])), 2)
    assert set(cv["multi_chunk"]) == {"queries", "baseline@20", "a alone@20", "b alone@20", "c alone@20"}


def test_the_markdown_names_the_baseline_and_the_verdict():
    rankings, golden = _random_case(n_queries=20, seed=9)
    md = ff.markdown(ff.fit_report(rankings, golden, {"a": 1, "b": 1, "c": 1}, folds=4, repeats=2))
    assert "baseline: a×1 + b×1 + c×1 (k=60)" in md
    assert "| a alone |" in md and "fitted, out of fold" in md
    assert md.rstrip().endswith(("yes.", "no."))
