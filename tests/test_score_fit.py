"""Score fusion fitted like rank fusion (situate/evaluation/score_fit.py, benchmarks/fusion_scores.py):
the candidate files round-trip and a bad one is refused by name; on the committed candidate files
(what search fuses for each dev query of the three labelled sets) the pooled fit chooses today's code
fusion, and on CoSQA it adds to the dense ranking where every rank fusion subtracted."""

import doctest
from pathlib import Path

import numpy as np
import pytest

from benchmarks import fusion_scores
from situate.evaluation import score_fit
from situate.resources.store import fusion, retrieval
from situate.resources.store.fusion import FUSION_BY_KIND, KindFusion

RANKINGS = Path(__file__).resolve().parents[1] / "benchmarks" / "rankings"


def test_the_modules_examples_hold():
    for m in (score_fit, fusion, retrieval):
        assert doctest.testmod(m).failed == 0, m.__name__


def test_a_bad_candidate_file_is_refused_by_name(tmp_path):
    junk = tmp_path / "junk.npz"
    junk.write_bytes(b"not a zip")
    with pytest.raises(ValueError, match="junk.npz: not a candidate file"):
        score_fit.read_candidates(junk)
    good = dict(np.load(RANKINGS / "docs-candidates.npz"))
    bent = tmp_path / "bent.npz"
    np.savez(bent, **{**good, "scores": good["scores"][:, :-1]})  # one score short
    with pytest.raises(ValueError, match="bent.npz: inconsistent candidate file"):
        score_fit.read_candidates(bent)
    for name, change in {
        "far.npz": {"golden": good["golden"] + 10**9},  # a golden key past the file's keys
        "float.npz": {"offsets": good["offsets"].astype(float)},  # offsets must be integers
        "objects.npz": {"scores": np.array([None] * 3, dtype=object)},  # a pickle: never loaded
    }.items():
        np.savez(tmp_path / name, **{**good, **change})
        with pytest.raises(ValueError, match=f"{name}: (inconsistent|not a) candidate file"):
            score_fit.read_candidates(tmp_path / name)
    with pytest.raises(ValueError, match="nowhere.npz: not a candidate file"):
        score_fit.candidate_query_ids(tmp_path / "nowhere.npz")


@pytest.fixture(scope="module")
def code_sets():
    return {lb: score_fit.read_candidates(RANKINGS / f"{lb}-candidates.npz") for lb in ("codebase", "cosqa")}


def test_the_code_fit_chooses_todays_code_fusion(code_sets):
    fit = fusion_scores.fit_kind(code_sets, fusion_scores.EQUAL)
    assert fit["wins"] and fit["chosen_most"] == FUSION_BY_KIND["code"].describe()
    assert fit["sets"]["cosqa"]["gain@5"] > fit["sets"]["cosqa"]["gain_std@5"]
    for k in (5, 20):  # the codebase set loses nothing beyond its fold spread
        assert fit["sets"]["codebase"][f"gain@{k}"] >= -fit["sets"]["codebase"][f"gain_std@{k}"]


def test_on_cosqa_the_code_fusion_adds_to_its_best_single_ranking(code_sets):
    singles = list(fusion_scores.SINGLE.values())
    rrf_code = KindFusion("rrf", (2.0, 0.0, 1.0), 10)  # the rank fusion it replaced
    got = score_fit.per_query_pass([*singles, FUSION_BY_KIND["code"], rrf_code], code_sets["cosqa"]).mean(1)
    best_single = got[: len(singles)].max(0)  # Pass@5, @10, @20: dense's 67.80 / 77.20 / 87.80
    assert np.all(got[len(singles)] > best_single)
    assert got[-1][2] < best_single[2]  # the rank fusion fell below dense at Pass@20
