"""One fusion fitted over several labelled sets (situate/evaluation/pooled_fit.py) and the ranking
files it reads (situate/evaluation/ranking_files.py): folds hold every set, the figures per set
equal scoring the chosen fusion for real, a ranking that helps one set and sinks the other is not
adopted, and a bad ranking file is refused by name."""

import gzip
import json
import random

import numpy as np
import pytest

from benchmarks import fusion_pooled
from situate.evaluation import fusion_fit as ff
from situate.evaluation import pooled_fit as pf
from situate.evaluation import ranking_files as rf


def _case(n_queries, seed, good_for_all=False, noise="abc"):
    """Rankings ``noise`` (a, b, c) of noise over 60 keys, and "good" that puts each query's golden chunks first
    (in every query, or only where ``good_for_all``; else it puts them last)."""
    rng = random.Random(seed)
    keys = [("d", i) for i in range(60)]
    golden = [rng.sample(keys, rng.randint(1, 3)) for _ in range(n_queries)]
    rankings = {n: [rng.sample(keys, rng.randint(5, 50)) for _ in range(n_queries)] for n in noise}
    rest = [[k for k in keys if k not in g] for g in golden]
    rankings["good"] = [list(g) + r if good_for_all else r for g, r in zip(golden, rest)]
    return rankings, golden


def test_every_fold_holds_a_share_of_every_set():
    groups = np.array([0] * 124 + [1] * 50)
    folds = pf.stratified_folds(groups, 5, np.random.default_rng(0))
    assert sorted(np.concatenate(folds).tolist()) == list(range(174))  # each query in one fold
    assert [int((groups[f] == 1).sum()) for f in folds] == [10] * 5
    assert sorted(int((groups[f] == 0).sum()) for f in folds) == [24, 25, 25, 25, 25]


def test_a_ranking_good_on_both_sets_is_chosen_and_wins():
    sets = {"x": _case(40, 1, good_for_all=True), "y": _case(30, 2, good_for_all=True)}
    cv = pf.pooled_fit_report(sets, {"a": 1, "b": 1, "c": 1}, folds=5, repeats=2)
    assert cv["sets"]["x"]["pass@5"] == cv["sets"]["y"]["pass@5"] == 100.0
    assert cv["sets"]["x"]["queries"] == 40 and cv["sets"]["y"]["queries"] == 30
    assert all("good×" in d for d in cv["chosen"])
    assert cv["wins"] is True and cv["macro"]["gain@5"] > 50


def test_a_ranking_good_on_one_set_and_bad_on_the_other_does_not_win():
    # "good" finds everything on x and pushes the golden chunks out of the list on y (a larger set)
    sets = {"x": _case(30, 3, good_for_all=True), "y": _case(90, 4)}
    cv = pf.pooled_fit_report(sets, {"a": 1, "b": 1, "c": 1}, folds=5, repeats=2)
    # the sets weigh the same, so the choice follows x's large gain...
    assert cv["sets"]["x"]["gain@5"] > 50
    # ...and y's loss keeps the verdict at no
    assert min(cv["sets"]["y"]["gain@5"], cv["sets"]["y"]["gain@20"]) < 0
    assert cv["wins"] is False


def test_per_set_figures_equal_scoring_the_chosen_fusion():
    sets = {"x": _case(20, 5), "y": _case(20, 6)}
    cv = pf.pooled_fit_report(sets, {"a": 1, "b": 1, "c": 1}, folds=4, repeats=1)
    names = ["a", "b", "c", "good"]
    for label, (rankings, golden) in sets.items():
        base = ff.per_query_pass([ff.Fusion((1.0, 1.0, 1.0, 0.0), 60)], ff.prepare(rankings, golden))[0]
        assert cv["sets"][label]["baseline@20"] == round(100 * float(base[:, 2].mean()), 2)
    # one shuffle: each query is scored once, by the fusion its fold chose
    space = ff.fusion_space(4, first=ff.Fusion((1.0, 1.0, 1.0, 0.0), 60))
    assert cv["space"] == len(space) == 2 * (3**4 - 1)
    assert sum(cv["chosen"].values()) == 4 and cv["rankings"] == names


def test_bad_sets_are_refused_with_the_reason():
    x = _case(10, 7)
    with pytest.raises(ValueError, match="no set"):
        pf.pooled_fit_report({}, {"a": 1})
    with pytest.raises(ValueError, match="set 'y' has rankings"):
        pf.pooled_fit_report({"x": x, "y": ({"a": x[0]["a"]}, x[1])}, {"a": 1})
    with pytest.raises(ValueError, match="cannot be cut into 5 folds"):
        pf.pooled_fit_report({"x": x, "y": _case(3, 8)}, {"a": 1})


def test_a_ranking_file_round_trips_and_feeds_the_benchmark(tmp_path, capsys):
    today = fusion_pooled.TODAY  # the benchmark adds rankings to today's three
    for label, seed in (("x", 1), ("y", 2)):
        rankings, golden = _case(20, seed, good_for_all=True, noise=today)
        rf.write_rankings(tmp_path / f"{label}.json.gz", rankings, [f"q{i}" for i in range(20)], golden)
    back = rf.read_rankings(tmp_path / "x.json.gz")
    assert back["rankings"] == _case(20, 1, good_for_all=True, noise=today)[0] and back["query_ids"][3] == "q3"
    out = tmp_path / "pooled"
    args = [f"x={tmp_path / 'x.json.gz'}", f"y={tmp_path / 'y.json.gz'}", "--cv-rankings", ";good", "--out", str(out)]
    assert fusion_pooled.main([*args, "--repeats", "2"]) == 0
    fits = json.loads(out.with_suffix(".json").read_text())["fits"]
    assert list(fits) == ["none (today's three re-weighted)", "good"]
    assert fits["good"]["wins"] is True and fits["none (today's three re-weighted)"]["space"] == 52
    assert "| good | 160 |" in out.with_suffix(".md").read_text()
    # each kind of chunk fitted apart too: one fusion for x's kind, one for y's
    assert fusion_pooled.main([*args, "--repeats", "2", "--kinds", "x=code,y=prose"]) == 0
    kinds = json.loads(out.with_suffix(".json").read_text())["kinds"]
    assert list(kinds) == ["code", "prose"] and list(kinds["code"]["good"]["sets"]) == ["x"]
    assert "**prose** (y), fitted apart" in out.with_suffix(".md").read_text()
    with pytest.raises(SystemExit):
        fusion_pooled.main([*args, "--kinds", "x=code"])  # y has no kind
    with pytest.raises(ValueError, match="x: no ranking nothing"):
        fusion_pooled.main([*args[:2], "--cv-rankings", "nothing", "--out", str(out)])


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (b"not gzip", "not gzip JSON"),
        (gzip.compress(b'{"format": "other"}'), "not a situate-rankings/1 file"),
        (
            gzip.compress(
                json.dumps({"format": rf.FORMAT, "query_ids": ["q"], "golden": [[["d", 0]]], "rankings": {}}).encode()
            ),
            "0 rankings",
        ),
        (
            gzip.compress(
                json.dumps(
                    {"format": rf.FORMAT, "query_ids": ["q"], "golden": [[["d", 0]]], "rankings": {"a": [[["d", "x"]]]}}
                ).encode()
            ),
            r"ranking 'a', query 0: \['d', 'x'\] is not a \[doc_id, chunk_index\] key",
        ),
        (
            gzip.compress(
                json.dumps(
                    {"format": rf.FORMAT, "query_ids": ["q", "r"], "golden": [[]], "rankings": {"a": [[], []]}}
                ).encode()
            ),
            "golden does not have one list for each of the 2 queries",
        ),
    ],
)
def test_a_bad_ranking_file_is_refused_by_name(tmp_path, content, reason):
    path = tmp_path / "bad.json.gz"
    path.write_bytes(content)
    with pytest.raises(ValueError, match=f"ranking file {path}: .*{reason}|ranking file {path}: {reason}"):
        rf.read_rankings(path)


def test_a_ranking_file_over_the_bound_is_refused_before_reading(tmp_path, monkeypatch):
    path = tmp_path / "big.json.gz"
    rf.write_rankings(path, {"a": [[("d", i) for i in range(100)]]}, ["q"], [[("d", 0)]])
    monkeypatch.setattr(rf, "MAX_FILE_BYTES", 10)
    with pytest.raises(ValueError, match="bytes, over the 10 allowed"):
        rf.read_rankings(path)
    monkeypatch.setattr(rf, "MAX_FILE_BYTES", 2**20)
    monkeypatch.setattr(rf, "MAX_DECOMPRESSED_BYTES", 100)
    with pytest.raises(ValueError, match="decompresses past 100 bytes"):
        rf.read_rankings(path)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        rf.read_rankings(tmp_path / "none.json.gz")
