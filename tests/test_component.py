"""situate as a Dagster component (``situate.pipelines.component.SituateCollection``): several
collections side by side in one code location, each with its own asset keys, partitions,
resources, jobs, sensor and schedule; ``situate sync`` (a collection ingested from the command
line); and, end to end, a fresh Dagster project made with ``create-dagster`` that follows
docs/component.md's command block as written (the commands are read from the page): the project
and situate installed, a ``dagster.yaml`` limiting runs to one, two collections scaffolded with
``dg scaffold defs``, checked and listed, one ingested with the real default models."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import sysconfig
import textwrap
import venv
from pathlib import Path

import dagster as dg
import pytest

from situate.pipelines.component import SituateCollection
from situate.resources.errors import SettingError
from tests.conftest import needs_models
from tests.test_namespace import REPO, _build_wheel

BIN = Path(sys.executable).parent


def _two(tmp_path: Path) -> dg.Definitions:
    (tmp_path / "product-docs").mkdir()
    (tmp_path / "code-docs").mkdir()
    product = SituateCollection(
        name="product",
        docs=str(tmp_path / "product-docs"),
        home=str(tmp_path / "product-data"),
        chunk_tokens=400,
        code_chunk_tokens=150,
        owners=["team:docs"],
        tags={"domain": "product"},
    )
    code = SituateCollection(
        name="code",
        docs=str(tmp_path / "code-docs"),
        home=str(tmp_path / "code-data"),
        cron=None,
        context="structure",
        exclude=["tests/", "*.csv"],
        generated="skip",
    )
    return dg.Definitions.merge(dg.build_defs_for_component(product), dg.build_defs_for_component(code))


def test_two_collections_live_side_by_side_under_their_own_names(tmp_path):
    defs = _two(tmp_path)
    graph = defs.resolve_asset_graph()
    keys = {k.to_user_string() for k in graph.get_all_asset_keys()}
    stages = ["raw_documents", "chunks", "fitted_preambles", "blurbs", "embeddings", "bm25_index"]
    assert keys == {f"{c}/{s}" for c in ("product", "code") for s in stages}
    node = {k.to_user_string(): graph.get(k) for k in graph.get_all_asset_keys()}
    assert node["product/blurbs"].partitions_def.name == "product_documents"
    assert node["code/chunks"].partitions_def.name == "code_documents"
    # each collection's checks are on its own assets
    checks = {k.asset_key.to_user_string() + ":" + k.name for k in graph.asset_check_keys}
    assert {"product/raw_documents:documents_readable", "code/bm25_index:ids_match_table"} <= checks
    # jobs, sensors, the schedule only where a cron is set
    jobs = {j.name for j in defs.resolve_all_job_defs()}
    assert {"product_ingest", "product_bm25", "code_ingest", "code_bm25"} <= jobs
    sensors = {s.name for s in defs.sensors}
    assert sensors == {f"{c}_{s}" for c in ("product", "code") for s in ("documents_sensor", "bm25_automation")}
    assert [s.name for s in defs.schedules] == ["product_nightly_reingest"]
    # their own resources: data folders, docs folders, chunking
    res = defs.resources
    assert res["product_store"].home.endswith("product-data") and res["code_store"].home.endswith("code-data")
    assert res["product_docs"].path.endswith("product-docs") and res["code_docs"].path.endswith("code-docs")
    assert res["code_docs"].rules.exclude == ("tests/", "*.csv") and res["code_docs"].rules.generated == "skip"
    assert res["product_docs"].rules.exclude == () and res["product_docs"].rules.generated == "index"
    assert (res["product_chunking"].chunk_tokens, res["product_chunking"].code_chunk_tokens) == (400, 150)
    assert (res["code_chunking"].chunk_tokens, res["code_chunking"].code_chunk_tokens) == (300, 200)  # defaults
    assert res["code_llm"].context == "structure" and res["product_llm"].context == "document"
    # what the UI shows: kinds, owners, tags, and code versions that follow the settings
    assert {"llama.cpp", "python"} <= set(node["product/blurbs"].kinds)
    assert "lancedb" in node["product/embeddings"].kinds and "bm25" in node["code/bm25_index"].kinds
    assert node["product/chunks"].owners == ["team:docs"] and node["code/chunks"].owners == []
    assert node["product/chunks"].tags.get("domain") == "product"
    assert node["product/chunks"].code_version != node["code/chunks"].code_version  # 400 vs 800 tokens
    assert node["product/blurbs"].code_version != node["code/blurbs"].code_version  # document vs structure
    assert len(node["product/embeddings"].code_version) == 12
    # a freshness policy on the output where a schedule is set (product), none without (code)
    assert node["product/bm25_index"].freshness_policy.fail_window.to_timedelta().total_seconds() == 30 * 3600
    assert node["code/bm25_index"].freshness_policy is None


def test_a_changed_setting_changes_the_code_versions_downstream_of_it(tmp_path):
    def versions(**kw) -> dict[str, str]:
        c = SituateCollection(name="notes", docs=str(tmp_path), home=str(tmp_path / "data"), **kw)
        graph = dg.build_defs_for_component(c).resolve_asset_graph()
        return {k.path[-1]: graph.get(k).code_version for k in graph.get_all_asset_keys()}

    base, prompt = versions(), versions(prompt="anthropic-2024")
    served = versions(llm_url="http://127.0.0.1:9/v1", llm_served_model="qwen2.5-7b-instruct")
    assert served["blurbs"] != base["blurbs"] and served["chunks"] == base["chunks"]  # another backend
    assert base["chunks"] == prompt["chunks"] and base["fitted_preambles"] == prompt["fitted_preambles"]
    assert base["blurbs"] != prompt["blurbs"] and base["embeddings"] != prompt["embeddings"]
    assert versions(overlap_tokens=40)["chunks"] != base["chunks"]


def test_every_setting_attribute_is_a_settings_field():
    import dataclasses

    from situate.pipelines.component import GLOBS_GIVEN, SETTINGS_GIVEN
    from situate.resources.settings import Settings

    fields = {f.name for f in dataclasses.fields(Settings)}
    assert set(SETTINGS_GIVEN) <= fields and set(SETTINGS_GIVEN) <= set(SituateCollection.model_fields)
    assert set(GLOBS_GIVEN) <= fields and set(GLOBS_GIVEN) <= set(SituateCollection.model_fields)


def test_a_bad_attribute_is_refused_naming_the_setting(tmp_path):
    bad = SituateCollection(name="notes", docs=str(tmp_path), home=str(tmp_path / "d"), chunk_tokens=0)
    with pytest.raises(SettingError, match=r"SITUATE_CHUNK_TOKENS=0 is below its minimum, 1"):
        dg.build_defs_for_component(bad)
    with pytest.raises(SettingError, match=r"name 'Notes!'"):
        dg.build_defs_for_component(SituateCollection(name="Notes!", docs=str(tmp_path), home=str(tmp_path)))


#: Run in the project's environment: the service, the MCP server and the LangChain retriever over
#: both collections at once.
SEARCH_ALL = textwrap.dedent(
    """
    import asyncio, json, sys
    from fastapi.testclient import TestClient
    from situate.integrations.langchain import SituateRetriever
    from situate.mcp_server import create_server
    from situate.service import create_app

    cols, q = json.loads(sys.argv[1]), sys.argv[2]
    client = TestClient(create_app(collections=cols), base_url="http://127.0.0.1")
    hits = client.get("/search", params={"q": q, "k": 4}).json()
    health = client.get("/health").json()
    tool = asyncio.run(create_server(collections=cols).call_tool("search", {"query": q, "k": 4}))
    docs = SituateRetriever(collections=cols, k=4).invoke(q)
    print("RESULT " + json.dumps({
        "service": [[h["collection"], h["source"]] for h in hits],
        "health": health,
        "mcp": str(tool),
        "langchain": [[d.metadata["collection"], d.metadata["source"]] for d in docs],
    }))
    """
)


def page_commands(page: Path = REPO / "docs" / "component.md") -> str:
    """The command block of ``page``'s "The commands" section, as a bash script, less the lines that
    start ``dg dev`` (the UI serves until stopped)."""
    section = page.read_text().split("## The commands", 1)[1]
    block = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
    return "".join(line for line in block.splitlines(keepends=True) if not line.startswith("dg dev"))


def _project_env(project: Path, wheel_dir: Path) -> dict[str, str]:
    """The environment a user of the page has, made offline: ``project/.venv`` active, which reads
    this checkout's installed packages through a ``.pth`` line (a view of them without situate, so
    the page's ``pip install situate`` installs the wheel in ``wheel_dir``), with ``pip`` and ``dg``
    as scripts of its own; pip finds packages only there and in the installed ones (``PIP_NO_INDEX``,
    ``PIP_FIND_LINKS``) and builds the project with the installed hatchling (no build isolation)."""
    view = project.parent / "installed-packages"
    view.mkdir()
    for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
        if not entry.name.startswith(("situate", "__editable__")) and entry.suffix != ".pth":
            (view / entry.name).symlink_to(entry)
    venv.EnvBuilder(with_pip=False).create(project / ".venv")
    bin_dir = project / ".venv" / "bin"
    site = subprocess.run(
        [str(bin_dir / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    Path(site, "installed.pth").write_text(f"{view}\n")
    for script, module in (("pip", "pip"), ("dg", "dagster_dg_cli.cli")):
        (bin_dir / script).write_text(f'#!/bin/sh\nexec "{bin_dir}/python" -m {module} "$@"\n')
        (bin_dir / script).chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SITUATE_", "DAGSTER_HOME", "PYTHON", "PIP_"))}
    path = [p for p in env.get("PATH", "").split(os.pathsep) if p and Path(p).resolve() != BIN.resolve()]
    env.update(
        PATH=os.pathsep.join([str(bin_dir), *path]),
        VIRTUAL_ENV=str(project / ".venv"),
        PIP_NO_INDEX="1",
        PIP_FIND_LINKS=str(wheel_dir),
        PIP_NO_BUILD_ISOLATION="0",  # pip reads "0" as: build without isolation
        PIP_DISABLE_PIP_VERSION_CHECK="1",
        COLUMNS="250",  # dg list defs' table, unwrapped
    )
    return env


@needs_models
@pytest.mark.models
def test_a_fresh_dagster_project_follows_the_component_page_word_for_word(tmp_path, monkeypatch):
    """``create-dagster project``, then docs/component.md's command block run as written (all but
    ``dg dev``): the project and situate installed, the instance's ``dagster.yaml``, two collections
    scaffolded, ``dg check defs`` and ``dg list defs``, ``situate sync product`` ingesting the product
    collection with the real default models, and a search of it; then the second collection synced
    and both searched by the service, MCP and LangChain."""
    made = subprocess.run(
        [str(BIN / "create-dagster"), "project", "my_project", "--no-uv-sync"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert made.returncode == 0, made.stderr[-2000:]
    project = tmp_path / "my_project"
    env = _project_env(project, _build_wheel(tmp_path / "dist").parent)
    (project / "docs" / "product").mkdir(parents=True)  # the user's documents
    (project / "docs" / "product" / "billing.md").write_text(
        "# Billing\n\nInvoices are issued on the first day of every month. A refund reaches the card it was "
        "paid with within five business days. Annual plans are billed once a year, on the day the plan began.\n"
    )
    run = subprocess.run(
        ["bash", "-euxo", "pipefail", "-c", page_commands()],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-4000:]
    out = run.stdout
    assert "situate.pipelines.component.SituateCollection" in out  # dg list components
    assert "All definitions loaded successfully" in out  # dg check defs
    for name in ("product/bm25_index", "code/raw_documents", "product_ingest", "code_bm25", "product_documents_sensor"):
        assert name in out, name  # dg list defs
    assert "situate: product_ingest over billing.md: done" in out and "situate: product_bm25: done" in out
    assert "situate: code_bm25: done" in out
    hits = out.split("code_bm25: done", 1)[1]  # situate search over both collections
    assert "billing.md" in hits and "[product]" in hits
    monkeypatch.setenv("DAGSTER_HOME", str(project / ".dagster"))  # as the page exports it
    _assert_the_instance_and_table(project)
    _assert_both_collections_searched(project, env)


def _assert_the_instance_and_table(project: Path) -> None:
    """The page's dagster.yaml is situate's own and limits runs to one; the sync's partitions and runs
    are on that instance; each table has its documents' rows (the code collection: the project's
    own source: key my__project_.definitions.py, its path encoded)."""
    import yaml

    from situate.pipelines.settings import DAGSTER_YAML
    from situate.resources.store.store import Store

    home = project / ".dagster"
    assert yaml.safe_load((home / "dagster.yaml").read_text()) == yaml.safe_load(DAGSTER_YAML)
    with dg.DagsterInstance.from_config(str(home)) as instance:
        assert instance.get_concurrency_config().run_queue_config.max_concurrent_runs == 1
        assert list(instance.get_dynamic_partitions("product_documents")) == ["billing.md"]
        runs = instance.get_runs()
        assert {r.job_name for r in runs} == {"product_ingest", "product_bm25", "code_ingest", "code_bm25"}
        assert {r.status for r in runs} == {dg.DagsterRunStatus.SUCCESS}
    store = Store(home=str(project / "data" / "product"))
    assert set(store.document_states()) == {"billing.md"} and store.count_rows() >= 1
    assert "my__project_.definitions.py" in Store(home=str(project / "data" / "code")).document_states()


def _assert_both_collections_searched(project: Path, env: dict[str, str]) -> None:
    """Both collections (the user's documents and the project's own code) searched at once by the
    service, the MCP server and the LangChain retriever."""
    cols = {"product": str(project / "data" / "product"), "code": str(project / "data" / "code")}
    run = subprocess.run(
        ["python", "-c", SEARCH_ALL, json.dumps(cols), "how long does a refund take"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    got = json.loads(next(line for line in run.stdout.splitlines() if line.startswith("RESULT "))[7:])
    assert got["service"][0] == ["product", "billing.md"] and "code" in {c for c, _ in got["service"]}
    assert got["langchain"][0] == ["product", "billing.md"] and "code" in {c for c, _ in got["langchain"]}
    assert "billing.md" in got["mcp"] and "'collection': 'code'" in got["mcp"]
    health = got["health"]["collections"]
    assert health["product"]["home"] == "product" and health["code"]["table_rows"] > 0  # no path shown


def test_a_search_of_collections_refuses_what_it_cannot_search(capsys):
    from situate.pipelines.cli import main
    from situate.pipelines.operations import QueryError, search_collections

    with pytest.raises(QueryError, match="no collection to search"):
        search_collections("tides", {})
    with pytest.raises(QueryError, match=r"collection name 'Docs!'"):
        search_collections("tides", {"Docs!": "/nowhere"})
    assert main(["search", "tides", "--collection", "docs"]) == 2
    assert "--collection takes NAME=DATA_FOLDER" in capsys.readouterr().err


def _tick(defs: dg.Definitions, instance, name: str) -> dg.SensorResult | dg.SkipReason:
    """One evaluation of collection ``name``'s sensor, with what it asks carried out: its partitions
    added and deleted, its runs executed in process."""
    sensor = defs.get_sensor_def(f"{name}_documents_sensor")
    result = sensor(dg.build_sensor_context(instance=instance, definitions=defs, resources=defs.resources))
    if isinstance(result, dg.SkipReason):
        return result
    for req in result.dynamic_partitions_requests:
        if isinstance(req, dg.AddDynamicPartitionsRequest):
            instance.add_dynamic_partitions(req.partitions_def_name, list(req.partition_keys))
        else:
            for key in req.partition_keys:
                instance.delete_dynamic_partition(req.partitions_def_name, key)
    for req in result.run_requests:
        run = defs.resolve_job_def(req.job_name).execute_in_process(
            instance=instance, partition_key=req.partition_key, tags=req.tags
        )
        assert run.success, req
    return result


def _ingested(result) -> list[str]:
    keys = []
    for req in result.run_requests:
        if req.job_name.endswith("_ingest"):
            tags = req.tags
            keys.append(req.partition_key or tags["dagster/asset_partition_range_start"] + "…")
    return keys


@needs_models
@pytest.mark.models
def test_a_collection_on_object_storage_follows_its_objects(s3_server, tmp_path):
    """A docs source on S3 (SeaweedFS): an object added, changed and removed is ingested,
    re-ingested and removed by the sensor's runs; hidden and unknown files are skipped; an emptied
    prefix removes nothing (the mass-removal guard)."""
    import uuid

    from situate.pipelines.sync import bad_inputs_from_store
    from situate.resources.store.objects import ObjectFolder
    from situate.resources.store.store import Store

    uri = f"s3://{s3_server['bucket']}/docs-{uuid.uuid4().hex[:8]}"
    src = ObjectFolder(uri)
    src.put("guide.md", b"# Guide\n\nThe tide tables are printed every Monday for the harbour master.\n")
    src.put("notes/ops.md", b"# Operations\n\nRotate the signing keys every ninety days.\n")
    src.put(".draft.md", b"# Draft\n\nnot a document yet\n")
    src.put("photo.png", b"\x89PNG\r\n\x1a\n")
    src.put("broken.md", bytes(range(256)) * 8)  # binary under a text name: fails alone, named
    home = tmp_path / "data"
    defs = dg.build_defs_for_component(
        SituateCollection(name="remote", docs=uri, home=str(home), context="structure", cron=None)
    )
    instance = dg.DagsterInstance.ephemeral()
    store = Store(home=str(home))

    first = _tick(defs, instance, "remote")
    assert sorted(instance.get_dynamic_partitions("remote_documents")) == ["broken.md", "guide.md", "notes_.ops.md"]
    assert _ingested(first) and set(store.document_states()) == {"guide.md", "notes_.ops.md"}
    bad = bad_inputs_from_store(store, ["broken.md", "guide.md"])
    assert list(bad) == ["broken.md"] and bad["broken.md"][0].startswith("etag:"), bad
    assert _ingested(_tick(defs, instance, "remote")) == []  # nothing changed: nothing asked, the bad one not retried

    src.put("guide.md", b"# Guide\n\nThe tide tables are now printed every Thursday, and posted online.\n")
    changed = _tick(defs, instance, "remote")
    assert _ingested(changed) == ["guide.md"]
    texts = store.columns(["document_key", "text"]).to_pylist()
    assert any("Thursday" in r["text"] for r in texts if r["document_key"] == "guide.md")
    assert not any("Monday" in r["text"] for r in texts if r["document_key"] == "guide.md")

    src.delete("notes/ops.md")
    removed = _tick(defs, instance, "remote")
    deletes = [r for r in removed.dynamic_partitions_requests if isinstance(r, dg.DeleteDynamicPartitionsRequest)]
    assert [list(r.partition_keys) for r in deletes] == [["notes_.ops.md"]]
    assert set(store.document_states()) == {"guide.md"}

    rows = store.count_rows()
    src.delete("guide.md")
    src.delete("broken.md")  # no document under the prefix now (hidden and unknown files aside): held
    held = _tick(defs, instance, "remote")
    assert not [r for r in held.dynamic_partitions_requests if isinstance(r, dg.DeleteDynamicPartitionsRequest)]
    assert store.count_rows() == rows
    assert sorted(instance.get_dynamic_partitions("remote_documents")) == ["broken.md", "guide.md"]


def _evaluate(defs: dg.Definitions, instance, name: str):
    """One evaluation of collection ``name``'s sensor (nothing it asks for is carried out)."""
    sensor = defs.get_sensor_def(f"{name}_documents_sensor")
    return sensor(dg.build_sensor_context(instance=instance, definitions=defs, resources=defs.resources))


def _collection(name: str, docs: Path, home: str, root: Path | None = None) -> dg.Definitions:
    from situate.pipelines.settings import check_environment

    c = SituateCollection(name=name, docs=str(docs), home=home, context="structure", cron=None)
    return c.definitions(check_environment(), root=root)


def test_two_collections_are_refused_one_data_folder(tmp_path, monkeypatch):
    """At load, in one code location; across code locations, by the data folder's record of its
    collection, before the second collection's sensor lists or writes anything."""
    from situate.pipelines import component
    from situate.pipelines.preflight import StartupError

    for c in ("product", "code"):
        (tmp_path / f"docs-{c}").mkdir()
        (tmp_path / f"docs-{c}" / "README.md").write_text(f"# {c}\n\nThe harbour opens at six.\n")
    home = str(tmp_path / "shared-home")
    monkeypatch.setattr(component, "_HOMES", {})
    _collection("product", tmp_path / "docs-product", home)
    with pytest.raises(SettingError, match=r"collection 'code' has the data folder \(home\) of collection 'product'"):
        _collection("code", tmp_path / "docs-code", home + "/")  # the same folder, written otherwise
    instance = dg.DagsterInstance.ephemeral()
    product = _collection("product", tmp_path / "docs-product", home)
    assert _evaluate(product, instance, "product").dynamic_partitions_requests[0].partition_keys == ["README.md"]
    assert json.loads((tmp_path / "shared-home" / "collection").read_text()) == {"collection": "product"}
    monkeypatch.setattr(component, "_HOMES", {})  # another code location (process)
    code = _collection("code", tmp_path / "docs-code", home)
    before = sorted(p.name for p in (tmp_path / "shared-home").iterdir())
    with pytest.raises(StartupError, match=r"belongs to collection 'product': give collection 'code' a data folder"):
        _evaluate(code, instance, "code")
    assert sorted(p.name for p in (tmp_path / "shared-home").iterdir()) == before
    assert _evaluate(product, instance, "product").dynamic_partitions_requests[0].partition_keys == ["README.md"]


def test_a_collections_data_folder_is_checked_and_marked_as_situate_ingest_does(tmp_path):
    """``home: "."`` (a project root of the user's) is refused, nothing written into it; a data
    folder inside the docs folder is marked, so its own files are never taken for documents."""
    from situate.pipelines.preflight import StartupError

    proj = tmp_path / "project"
    (proj / "docs").mkdir(parents=True)
    (proj / "pyproject.toml").write_text("[project]\nname = 'mine'\n")
    (proj / "docs" / "guide.md").write_text("# Guide\n\nThe harbour opens at six.\n")
    instance = dg.DagsterInstance.ephemeral()
    rooted = _collection("rooted", Path("docs"), ".", root=proj)
    with pytest.raises(StartupError, match=r"is a non-empty folder that is not a situate data folder"):
        _evaluate(rooted, instance, "rooted")
    assert sorted(p.name for p in proj.iterdir()) == ["docs", "pyproject.toml"]

    inside = _collection("inside", proj / "docs", str(proj / "docs" / "index"))
    first = _evaluate(inside, instance, "inside")
    assert (proj / "docs" / "index" / ".situate-data").is_file()
    assert [list(r.partition_keys) for r in first.dynamic_partitions_requests] == [["guide.md"]]
    stage = proj / "docs" / "index" / "stages" / "guide.md" / "chunks.json"  # as a run writes it
    stage.parent.mkdir(parents=True)
    stage.write_text('{"chunks": []}')
    again = _evaluate(inside, instance, "inside")
    assert [list(r.partition_keys) for r in again.dynamic_partitions_requests] == [["guide.md"]]


def _tiny_project(root: Path, docs: Path) -> Path:
    """A Dagster project made by hand (what ``create-dagster project`` writes, less its extras): the
    ``tinyproj`` package with one collection, ``notes``, in its defs folder."""
    (root / "src" / "tinyproj" / "defs" / "notes").mkdir(parents=True)
    (root / "pyproject.toml").write_text(
        '[project]\nname = "tinyproj"\n\n[tool.dg]\ndirectory_type = "project"\n\n'
        '[tool.dg.project]\nroot_module = "tinyproj"\n'
    )
    (root / "src" / "tinyproj" / "__init__.py").write_text("")
    (root / "src" / "tinyproj" / "defs" / "__init__.py").write_text("")
    (root / "src" / "tinyproj" / "defs" / "notes" / "defs.yaml").write_text(
        "type: situate.pipelines.component.SituateCollection\n"
        f"attributes:\n  name: notes\n  docs: {docs}\n  home: data/notes\n  cron: null\n"
    )
    return root


def test_situate_sync_refuses_what_it_cannot_sync(tmp_path, monkeypatch, capsys):
    """Without DAGSTER_HOME, with the project not installed, with a collection it does not have:
    one line each, exit 2, nothing registered."""
    from situate.pipelines import component
    from situate.pipelines.cli import main

    monkeypatch.setattr(component, "_HOMES", {})
    (tmp_path / "notes").mkdir()
    project = _tiny_project(tmp_path / "proj", tmp_path / "notes")
    monkeypatch.chdir(project)
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    assert main(["sync", "notes"]) == 2
    assert "DAGSTER_HOME is not set" in capsys.readouterr().err
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "instance"))
    (tmp_path / "instance").mkdir()
    assert main(["sync", "notes"]) == 2  # tinyproj is not importable: not installed
    err = capsys.readouterr().err
    assert "does not load" in err and "install the project in this environment (`pip install -e .`" in err
    monkeypatch.syspath_prepend(str(project / "src"))  # as an editable install would
    assert main(["sync", "product"]) == 2
    assert "the project has no collection 'product' (its collections: notes)" in capsys.readouterr().err
    with dg.DagsterInstance.from_config(str(tmp_path / "instance")) as instance:
        assert list(instance.get_dynamic_partitions("notes_documents")) == []
