"""The code query map: the file is checked before use, the setting chooses it, and the shipped one
is what the benchmark that makes it reports."""

import doctest
import json
import os
from pathlib import Path

import numpy as np
import pytest

from situate.resources.models import code_adapter
from situate.resources.models.code_adapter import ADAPTERS, load_adapter

REPORT = Path(__file__).parent.parent / "benchmarks" / "reports" / "code-adapter.json"


def test_the_examples_of_the_module_hold():
    assert doctest.testmod(code_adapter).failed == 0


@pytest.mark.parametrize(
    "array, message",
    [
        (np.eye(3, dtype=np.float32), "float32 of shape (3, 3), not float32 (4, 4)"),
        (np.eye(4), "float64 of shape (4, 4)"),
        (np.full((4, 4), np.nan, np.float32), "not finite"),
        (np.array([{"a": 1}], dtype=object), "not a .npy array"),
        (np.zeros((4, 4), np.float32), "degenerate (smallest singular value 0"),
        (None, "not a .npy array"),  # an empty file
    ],
)
def test_an_adapter_file_that_is_not_a_finite_square_float32_matrix_is_refused_by_name(tmp_path, array, message):
    path = tmp_path / "bad.npy"
    if array is None:
        path.write_bytes(b"")
    else:
        np.save(path, array, allow_pickle=True)
    with pytest.raises(ValueError, match="code adapter .*bad.npy") as e:
        load_adapter(str(path), 4)
    assert message in str(e.value)


def test_a_map_changed_on_disk_is_read_again_and_a_folder_is_refused(tmp_path):
    path = tmp_path / "map.npy"
    np.save(path, np.eye(4, dtype=np.float32))
    first = load_adapter(str(path), 4)
    np.save(path, 2 * np.eye(4, dtype=np.float32))
    os.utime(path, ns=(1, 1))  # a new version even where the clock's step hides the rewrite
    assert load_adapter(str(path), 4).sha256 != first.sha256
    with pytest.raises(ValueError, match="not a file"):
        load_adapter(str(tmp_path), 4)


def test_an_adapter_file_larger_than_its_bound_is_refused_before_it_is_read(tmp_path):
    path = tmp_path / "big.npy"
    path.write_bytes(b"\0" * (code_adapter.MAX_BYTES + 1))
    with pytest.raises(ValueError, match=r"big.npy: \d+ bytes, more than"):
        load_adapter(str(path), 4)


def test_the_setting_chooses_the_embedders_own_map_and_none_for_another_model_or_off(monkeypatch):
    from situate.pipelines.settings import check_environment, embedder_from_env

    for name in ("SITUATE_CODE_ADAPTER", "SITUATE_EMBED_MODEL", "SITUATE_EMBED_URL"):
        monkeypatch.delenv(name, raising=False)
    default = embedder_from_env(check_environment(), plain=True)  # off by default (docs/quality.md)
    assert default.code_adapter == "" and default.code_query_vector(np.ones(384, np.float32)) is None
    monkeypatch.setenv("SITUATE_CODE_ADAPTER", "1")
    assert embedder_from_env(check_environment(), plain=True).code_adapter == str(ADAPTERS["bge-small-en-v1.5"])
    monkeypatch.setenv("SITUATE_EMBED_MODEL", "nomic-embed-text-v1.5")  # no map learnt for it
    assert embedder_from_env(check_environment(), plain=True).code_adapter == ""


def test_the_shipped_map_is_the_one_the_benchmark_made_and_moves_a_query_a_little():
    path = ADAPTERS["bge-small-en-v1.5"]
    assert path.stat().st_size < 1_000_000
    adapter = load_adapter(str(path), 384)
    assert adapter.sha256 == json.loads(REPORT.read_text())["shipped"]["sha256"]
    q = np.random.default_rng(0).normal(size=384).astype(np.float32)
    q /= np.linalg.norm(q)
    mapped = adapter.apply(q)
    assert np.linalg.norm(mapped) == pytest.approx(1.0, abs=1e-5)
    assert 0.5 < float(q @ mapped) < 0.9999  # near the identity, not it


def test_a_missing_or_damaged_map_is_a_warning_naming_it_and_code_is_compared_with_the_plain_vector(tmp_path):
    from situate.pipelines.operations import code_query_vector
    from situate.resources.models.llm import Embedder

    gone, empty = tmp_path / "gone.npy", tmp_path / "empty.npy"
    empty.write_bytes(b"")
    embedder = Embedder(model_path="m.onnx", code_adapter=str(gone))
    vector, warnings = code_query_vector(embedder, np.ones(384, np.float32))
    assert vector is None and len(warnings) == 1 and f"no code query map at {gone}" in warnings[0]
    assert embedder.code_adapter_id() == f"missing: {gone}"
    for damaged in (empty, tmp_path):
        vector, warnings = code_query_vector(Embedder(model_path="m.onnx", code_adapter=str(damaged)), np.ones(384))
        assert vector is None and len(warnings) == 1 and f"code adapter {damaged}:" in warnings[0]
    assert Embedder(model_path="m.onnx", code_adapter=str(tmp_path)).code_adapter_id().startswith("unreadable: ")


def test_the_setting_on_with_an_embedder_that_has_no_map_is_a_warning_not_silence():
    from situate.pipelines.operations import code_query_vector
    from situate.resources.models.llm import Embedder

    other = Embedder(model_path="nomic.gguf", model_id="nomic-embed-text-v1.5")  # code_adapter "": none learnt for it
    assert code_query_vector(other, np.ones(768, np.float32)) == (None, [])  # setting off: nothing to say
    vector, warnings = code_query_vector(other, np.ones(768, np.float32), wanted=True)
    assert vector is None and len(warnings) == 1
    assert "no code query map for the embedder nomic-embed-text-v1.5 run in process" in warnings[0]
