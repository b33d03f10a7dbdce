"""The embedder's cut (indexed text longer than its context) is said once a run, with the run's
count, not once a group of documents: a folder of 46 files printed 42 such warnings."""

from __future__ import annotations

import dagster as dg
from conftest import ingest_with, needs_models
from test_blurb_files import _dagster_home
from test_kept_blurbs import guide

pytestmark = [needs_models]


def test_the_embedders_cut_is_reported_once_a_run(tmp_path, monkeypatch):
    from situate.contextual import stage_runs

    monkeypatch.setattr(stage_runs, "GROUP_DOCUMENTS", 1)  # each document commits as a group of its own
    docs = tmp_path / "docs"
    docs.mkdir()
    for name in ("a", "b", "c"):
        (docs / f"{name}.md").write_text(guide().replace("vault", f"vault-{name}"))
    s = ingest_with(docs, tmp_path / "home", SITUATE_CONTEXT="structure", SITUATE_CHUNK_TOKENS="800")
    assert s.failed == {}
    with _dagster_home(tmp_path / "home"):
        instance = dg.DagsterInstance.get()
        event = instance.get_latest_materialization_event(dg.AssetKey("embeddings"))
        logs = instance.all_logs(event.run_id)
    md = {k: v.value for k, v in event.asset_materialization.metadata.items()}
    cut = [e.user_message for e in logs if "cut to the embedder's" in (e.user_message or "")]
    assert md["inputs_cut"] >= 3 and md["documents_ok"] == 3, md  # every document has a chunk too long
    assert cut == [
        f"embeddings: {md['inputs_cut']} of {md['rows_written']} chunks' indexed text cut to the embedder's 512 "
        "tokens (BM25 indexes all of each)"
    ], cut
