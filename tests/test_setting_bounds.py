"""Setting bounds hold on every path (issue 32, finding 9).

``SITUATE_N_CTX=0`` or ``SITUATE_MAX_BLURB_CHUNKS=-1`` used to be refused by ``situate ingest``
only: through the Dagster definitions (``dagster asset materialize -m situate.pipelines.definitions``,
``situate dev``) they loaded, and -1 marked every document too large (``skipped:large-document``).
Here the real ``dagster`` command, real runs of the real definitions (a value changed after the
code location loaded, a value given as run config), ``situate dev`` and the CLI's own settings
read are each refused with one message naming the variable, its value and its bound; no blurb is
written.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest
from conftest import REPO, needs_models

from situate.assets.partitions import PARTITIONS, encode_key

#: The two values of the finding and the message each must get (the variable, the value, the bound).
FINDING = [
    ("SITUATE_N_CTX", "0", "SITUATE_N_CTX=0 is below its minimum, 1"),
    ("SITUATE_MAX_BLURB_CHUNKS", "-1", "SITUATE_MAX_BLURB_CHUNKS=-1 is below its minimum, 0"),
]


def _folders(tmp_path: Path) -> dict:
    """A docs folder of one real document (the start of python-dotenv's ``main.py``), a data folder
    and a Dagster instance folder (outside the data folder, so a scan of the data folder for a
    blurb status does not read the run logs); the environment of a run over them."""
    import importlib.util

    docs, home, instance = tmp_path / "docs", tmp_path / "home", tmp_path / "dagster"
    docs.mkdir()
    text = Path(importlib.util.find_spec("dotenv.main").origin).read_text()[:1500]
    (docs / "main.py").write_text(text)
    instance.mkdir()
    (instance / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    return {
        "SITUATE_DOCS": str(docs),
        "SITUATE_HOME": str(home),
        "DAGSTER_HOME": str(instance),
        "SITUATE_CHUNK_TOKENS": "120",
        "SITUATE_OVERLAP_TOKENS": "0",
    }


def _register(env: dict, key: str) -> None:
    """Register the document's partition on the instance of ``env`` (what a sync does)."""
    with dg.DagsterInstance.from_config(env["DAGSTER_HOME"]) as instance:
        instance.add_dynamic_partitions(PARTITIONS, [key])


def _large_document_marks(home: Path) -> list[str]:
    """Files under the data folder that hold a ``skipped:large-document`` blurb status."""
    if not home.exists():
        return []
    return [str(p) for p in home.rglob("*") if p.is_file() and b"skipped:large-document" in p.read_bytes()]


@needs_models
@pytest.mark.models
@pytest.mark.parametrize("name,value,message", FINDING)
def test_the_dagster_command_refuses_an_out_of_range_setting(tmp_path, name, value, message):
    """The real ``dagster asset materialize -m situate.pipelines.definitions`` over one real document."""
    env = _folders(tmp_path)
    key = encode_key("main.py")
    _register(env, key)
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "dagster",
            "asset",
            "materialize",
            "-m",
            "situate.pipelines.definitions",
            "--select",
            "raw_documents,chunks,fitted_preambles,blurbs",
            "--partition",
            key,
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=600,
        env=os.environ | env | {name: value},
    )
    said = out.stdout + out.stderr
    assert out.returncode != 0, said[-3000:]
    assert message in said, said[-3000:]
    assert _large_document_marks(Path(env["SITUATE_HOME"])) == []


def _ingest_in_process(env: dict, monkeypatch, run_config: dict | None = None, after_load: dict | None = None):
    """One ``ingest`` run of the real definitions (``situate.pipelines.definitions.build_definitions``, as
    the code location builds them: set variables become ``dg.EnvVar``) on a real instance;
    ``after_load`` is set in the environment after the definitions are built (a run launched
    later, by ``situate dev``'s daemon, reads them then)."""
    from situate.pipelines.definitions import build_definitions

    for k, v in env.items():
        monkeypatch.setenv(k, v)
    defs = build_definitions()
    for k, v in (after_load or {}).items():
        monkeypatch.setenv(k, v)
    key = encode_key("main.py")
    _register(env, key)
    with dg.DagsterInstance.from_config(env["DAGSTER_HOME"]) as instance:
        return defs.resolve_job_def("ingest").execute_in_process(
            instance=instance, partition_key=key, run_config=run_config or {}, raise_on_error=False
        )


def _failure_text(result) -> str:
    """Every error message of a run's events, joined."""
    parts = []
    for ev in result.all_events:
        err = getattr(ev.event_specific_data, "error", None) if ev.event_specific_data else None
        if err is not None:
            parts.append(err.to_string())
        if ev.message:
            parts.append(ev.message)
    return "\n".join(parts)


@needs_models
@pytest.mark.models
@pytest.mark.parametrize("name,value,message", FINDING)
def test_a_run_of_the_definitions_refuses_a_value_set_after_they_loaded(tmp_path, monkeypatch, name, value, message):
    """The code location loaded with good values (``dg.EnvVar``s); the run reads the bad one at its
    start: the resource refuses it before any step."""
    env = _folders(tmp_path)
    good = {"SITUATE_N_CTX": "768", "SITUATE_MAX_BLURB_CHUNKS": "2000"}[name]  # a dg.EnvVar when loaded
    result = _ingest_in_process({**env, name: good}, monkeypatch, after_load={name: value})
    assert not result.success
    assert message in _failure_text(result)
    assert not [ev for ev in result.all_events if ev.event_type_value == "STEP_START"]  # no step ran
    assert _large_document_marks(Path(env["SITUATE_HOME"])) == []


@needs_models
@pytest.mark.models
def test_run_config_out_of_range_is_refused_by_the_resource(tmp_path, monkeypatch):
    """A value given in the launchpad (run config) is held to the same bound."""
    from situate.pipelines.settings import resources_from_env

    env = _folders(tmp_path)
    llm = {"model_path": resources_from_env(plain=True)["llm"].model_path, "max_chunks_per_document": -1}
    result = _ingest_in_process(env, monkeypatch, run_config={"resources": {"llm": {"config": llm}}})
    assert not [ev for ev in result.all_events if ev.event_type_value == "STEP_START"]  # no step ran
    assert not result.success
    assert "SITUATE_MAX_BLURB_CHUNKS=-1 is below its minimum, 0" in _failure_text(result)
    assert _large_document_marks(Path(env["SITUATE_HOME"])) == []


def test_situate_dev_refuses_before_starting_dagster(tmp_path, monkeypatch, capsys):
    """``situate dev`` says the one line and exits 2; Dagster is never started."""
    from situate.pipelines.cli import main

    started = []

    def execv(*args):  # would replace this process with `dagster dev`
        started.append(args)
        raise AssertionError("dagster dev was started")

    monkeypatch.setattr(os, "execv", execv)
    for k, v in _folders(tmp_path).items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("SITUATE_MAX_BLURB_CHUNKS", "-1")
    try:
        code = main(["dev"])
    except AssertionError:
        code = None
    assert started == [] and code == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "situate: error: SITUATE_MAX_BLURB_CHUNKS=-1 is below its minimum, 0"
    ]


def _outside(bound) -> list:
    """A value below the low end and one above the high end of ``bound`` (where it has them)."""
    step = 1 if bound.kind is int else 0.5
    below = [bound.low - step] if bound.low is not None else []
    return below + ([bound.high + step] if bound.high is not None else [])


def _table() -> list:
    """The table's rows; one row of ``None`` where there is no table (a failing case, not a
    collection error)."""
    try:
        from situate.resources.settings import SETTING_BOUNDS
    except ImportError:
        return [("(no SETTING_BOUNDS table)", None)]
    return sorted(SETTING_BOUNDS.items())


@pytest.mark.parametrize("name,bound", _table())
def test_every_bound_is_held_on_the_cli_and_on_the_definitions_path(name, bound, monkeypatch):
    """Each bound of the one table: a value past either end is refused where the CLI reads the
    settings and where the code location does, with the same message."""
    from situate.pipelines.definitions import build_definitions
    from situate.pipelines.preflight import StartupError
    from situate.pipelines.settings import resources_from_env

    assert bound is not None, "situate.resources.models.llm.SETTING_BOUNDS: the one table of bounds"
    assert bound.source.strip(), f"{name}: a bound says where it comes from"
    outside = _outside(bound)
    assert outside, f"{name}: a bound has at least one end"
    for value in outside:
        monkeypatch.setenv(name, str(value))
        low, high = bound.low, bound.high
        end = f"below its minimum, {low}" if low is not None and value < low else f"above its maximum, {high}"
        for read in (lambda: resources_from_env(plain=True), build_definitions):
            with pytest.raises(StartupError) as e:
                read()
            assert str(e.value).startswith(f"{name}={value} is {end}"), str(e.value)


def test_values_inside_the_bounds_load(monkeypatch):
    from situate.pipelines.settings import resources_from_env

    for name, bound in _table():
        assert bound is not None, "situate.resources.models.llm.SETTING_BOUNDS: the one table of bounds"
        monkeypatch.setenv(name, str(bound.low if bound.low is not None else bound.high))
    monkeypatch.setenv("SITUATE_OVERLAP_TOKENS", "0")
    res = resources_from_env(plain=True)
    assert res["llm"].n_ctx == 1 and res["llm"].max_chunks_per_document == 0 and res["llm"].batch == 1


def test_overlap_must_be_smaller_than_the_chunk(monkeypatch):
    """The pair's rule (:func:`situate.contextual.chunking.chunk_text` refused it once per document)."""
    from situate.pipelines.definitions import build_definitions
    from situate.pipelines.preflight import StartupError
    from situate.pipelines.settings import resources_from_env

    monkeypatch.setenv("SITUATE_CHUNK_TOKENS", "100")
    monkeypatch.setenv("SITUATE_OVERLAP_TOKENS", "100")
    for read in (lambda: resources_from_env(plain=True), build_definitions):
        with pytest.raises(StartupError, match=r"SITUATE_OVERLAP_TOKENS=100 is not below SITUATE_CHUNK_TOKENS=100"):
            read()
    monkeypatch.setenv("SITUATE_CHUNK_TOKENS", "400")
    monkeypatch.setenv("SITUATE_CODE_CHUNK_TOKENS", "90")  # code's own size holds the overlap too
    with pytest.raises(StartupError, match=r"SITUATE_OVERLAP_TOKENS=100 is not below SITUATE_CODE_CHUNK_TOKENS=90"):
        resources_from_env(plain=True)
    monkeypatch.setenv("SITUATE_CODE_CHUNK_TOKENS", "300")
    chunking = resources_from_env(plain=True)["chunking"]
    assert (chunking.size_for(code=True), chunking.size_for(code=False)) == (300, 400)


def test_the_resource_holds_its_bounds_itself(monkeypatch):
    """Built directly (an application, a benchmark): the same bound and message; a ``dg.EnvVar``
    is checked when it has a value and left to the run's start when it has none."""
    import pydantic

    from situate.resources.models.llm import BlurbLLM, Embedder

    with pytest.raises(pydantic.ValidationError, match=r"SITUATE_N_CTX=0 is below its minimum, 1"):
        BlurbLLM(model_path="x.gguf", n_ctx=0)
    with pytest.raises(pydantic.ValidationError, match=r"SITUATE_BATCH=257 is above its maximum, 256"):
        BlurbLLM(model_path="x.gguf", batch=257)
    with pytest.raises(pydantic.ValidationError, match=r"SITUATE_N_THREADS=-1 is below its minimum, 0"):
        Embedder(model_path="x.onnx", n_threads=-1)
    monkeypatch.delenv("SITUATE_MAX_BLURB_CHUNKS", raising=False)
    later = BlurbLLM(model_path="x.gguf", max_chunks_per_document=dg.EnvVar.int("SITUATE_MAX_BLURB_CHUNKS"))
    assert later.model_path == "x.gguf"
    monkeypatch.setenv("SITUATE_MAX_BLURB_CHUNKS", "-1")
    with pytest.raises(pydantic.ValidationError, match=r"SITUATE_MAX_BLURB_CHUNKS=-1 is below its minimum, 0"):
        BlurbLLM(model_path="x.gguf", max_chunks_per_document=dg.EnvVar.int("SITUATE_MAX_BLURB_CHUNKS"))


def test_every_numeric_setting_has_a_bound():
    """Each numeric field of the settings (an ``int`` or ``float``) has a row of the bounds, and
    every row is a field; the resources' bounded fields are rows; the rerank depth's high end is
    the search's own bound."""
    import dataclasses

    from situate.pipelines.operations import MAX_K
    from situate.resources.models.llm import EMBEDDER_SETTINGS, LLM_SETTINGS
    from situate.resources.settings import SETTING_BOUNDS, Settings

    numeric = {
        f.metadata["env"] for f in dataclasses.fields(Settings) if str(f.type).split(" |")[0] in ("int", "float")
    }
    assert {"SITUATE_N_CTX", "SITUATE_MAX_BLURB_CHUNKS", "SITUATE_DOCS_PER_RUN", "SITUATE_RERANK_DEPTH"} <= numeric
    assert numeric == set(SETTING_BOUNDS), numeric ^ set(SETTING_BOUNDS)
    assert set(LLM_SETTINGS.values()) | set(EMBEDDER_SETTINGS.values()) <= set(SETTING_BOUNDS)
    assert SETTING_BOUNDS["SITUATE_RERANK_DEPTH"].high == MAX_K


def test_the_fallback_share_is_checked_at_start_not_at_import():
    """SITUATE_MAX_FALLBACK_SHARE is no longer read when ``situate.assets.bm25_index`` is imported (the
    table check reads it when its run starts): the import succeeds, and the settings check every
    command and the code location make refuses a value that is not a number, or outside 0-1,
    naming the variable."""
    check = "from situate.pipelines.settings import check_environment; check_environment()"
    for raw, said in (
        ("abc", "SITUATE_MAX_FALLBACK_SHARE='abc' is not a number"),
        ("1.5", "SITUATE_MAX_FALLBACK_SHARE=1.5 is above its maximum"),
    ):
        env = {**os.environ, "SITUATE_MAX_FALLBACK_SHARE": raw}
        imported = subprocess.run(
            [sys.executable, "-c", "import situate.assets.bm25_index"],
            capture_output=True,
            text=True,
            env=env,
            cwd=REPO,
        )
        assert imported.returncode == 0, imported.stderr[-300:]
        res = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, env=env, cwd=REPO)
        assert res.returncode != 0 and said in res.stderr, res.stderr[-300:]


def test_the_sync_interval_is_the_sensors_minimum_interval(monkeypatch, tmp_path):
    from situate.pipelines.definitions import build_definitions

    monkeypatch.setenv("SITUATE_SYNC_INTERVAL_S", "15")
    defs = build_definitions(str(tmp_path), str(tmp_path / "home"), plain=True)
    assert defs.get_sensor_def("documents_sensor").minimum_interval_seconds == 15
    monkeypatch.setenv("SITUATE_SYNC_INTERVAL_S", "4")
    from situate.pipelines.preflight import StartupError

    with pytest.raises(StartupError, match="SITUATE_SYNC_INTERVAL_S=4 is below its minimum, 5"):
        build_definitions(str(tmp_path), str(tmp_path / "home"), plain=True)
