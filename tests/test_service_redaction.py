"""Issue 32, finding 10: what an anonymous caller of ``situate serve`` reads names no absolute
path.  Without a bearer token every caller is anonymous, so the data folder is named by its last
component (issue 24); a model file the service cannot load, or a reranker that is not installed,
is named the same way, in a 500's ``detail`` and in the ``X-Situate-Warning`` headers alike.  A
caller with the token reads the whole path.

The service runs as a real process (``situate serve``) over a real data folder (rows with the
default embedder's width written by the product's own store code, no model needed to build it);
the 500 and the warning come from the real model code finding its files missing.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from conftest import REPO, needs_models

#: The rows' text (BM25 needs a vocabulary; the vectors are random).
TEXT = (
    "rotate the signing keys every ninety days and store the old ones for audits; the cache is "
    "invalidated when a document changes, and retries back off exponentially after a timeout"
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _data_folder(root: Path, rows: int = 40, dim: int = 384) -> Path:
    """A data folder of ``rows`` rows ``dim`` wide (bge-small-en-v1.5's width), its BM25 index and
    its mark, written by :func:`benchmarks.search_scale.build_store`."""
    sys.path.insert(0, str(REPO))
    from benchmarks.search_scale import build_store
    from situate.resources.store.store import DATA_MARKER

    rng = np.random.default_rng(7)
    vecs = rng.standard_normal((rows, dim)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    words = TEXT.split()
    texts = [" ".join(words[i % len(words) :] + words[: i % len(words)]) for i in range(rows)]
    build_store(root, vecs, texts)
    (root / DATA_MARKER).write_text("")
    return root


def _serve(home: Path, env: dict, token: str | None = None) -> tuple[subprocess.Popen, str]:
    """``situate serve`` as a real process on a loopback port, ready when /health answers."""
    port = _free_port()
    child_env = {k: v for k, v in (os.environ | env).items() if k != "SITUATE_API_TOKEN"}
    if token:
        child_env["SITUATE_API_TOKEN"] = token
    child = subprocess.Popen(
        [sys.executable, "-m", "situate.pipelines.cli", "serve", "--port", str(port), "--home", str(home)],
        cwd=REPO,
        env=child_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    base = f"http://127.0.0.1:{port}"
    req = urllib.request.Request(base + "/health", headers={"Authorization": f"Bearer {token}"} if token else {})
    for _ in range(240):
        if child.poll() is not None:
            raise AssertionError(f"situate serve exited {child.returncode}: {child.stdout.read()}")
        try:
            urllib.request.urlopen(req, timeout=5).read()
            return child, base
        except OSError:
            time.sleep(0.5)
    child.kill()
    raise AssertionError("situate serve did not answer /health")


def _get(url: str, token: str | None = None) -> tuple[int, object, dict]:
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, json.loads(r.read()), dict(r.headers)
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read()), dict(e.headers)


def _stop(child: subprocess.Popen) -> None:
    child.terminate()
    child.wait(60)


def test_a_missing_embedder_gives_an_anonymous_caller_its_file_name_not_its_path(tmp_path):
    """The issue's case: the default embedder's files are not in the models folder.  The search
    gets a 500 naming ``model.onnx``, not ``/…/alice/.cache/situate/models/…``; a caller with the
    token reads the whole path."""
    home = _data_folder(tmp_path / "team-notes")
    models = tmp_path / "alice" / ".cache" / "situate" / "models"
    models.mkdir(parents=True)
    env = {"SITUATE_MODELS_DIR": str(models), "SITUATE_RERANK_DEPTH": "0"}
    child, base = _serve(home, env)
    try:
        code, body, _ = _get(f"{base}/search?q=rotate+the+keys&k=3")
        code_h, health, _ = _get(f"{base}/health")
    finally:
        _stop(child)
    assert code == 500, body
    detail = body["detail"]
    assert detail.startswith("internal error: ModelFileError: embedder file model.onnx not found"), detail
    assert str(tmp_path) not in detail and "alice" not in detail and ".cache" not in detail
    assert code_h == 200 and health["home"] == "team-notes" and str(tmp_path) not in json.dumps(health)

    token = "redaction-test-token"
    child, base = _serve(home, env, token=token)
    try:
        code, body, _ = _get(f"{base}/search?q=rotate+the+keys&k=3", token=token)
    finally:
        _stop(child)
    where = models / "bge-small-en-v1.5" / "model.onnx"
    assert code == 500 and f"embedder file {where} not found" in body["detail"], body


@needs_models
def test_a_missing_reranker_is_named_without_its_path_in_the_warning(tmp_path):
    """With the default embedder installed and ``SITUATE_RERANK_MODEL`` pointing at a file that
    is not there, a reranked search answers from the first stage with a warning that names the
    reranker's file, not the folders above it."""
    home = _data_folder(tmp_path / "team-notes")
    absent = tmp_path / "alice" / "rerankers" / "cross-encoder.onnx"
    child, base = _serve(home, {"SITUATE_RERANK_MODEL": str(absent)})
    try:
        code, hits, headers = _get(f"{base}/search?q=rotate+the+signing+keys&k=3&rerank=5")
    finally:
        _stop(child)
    assert code == 200 and [h["rank"] for h in hits] == [1, 2, 3]
    warnings = [v for k, v in headers.items() if k.lower().startswith("x-situate-warning")]
    assert any(w.startswith("no reranker at cross-encoder.onnx: first-stage order kept") for w in warnings), warnings
    assert not any(str(tmp_path) in w or "alice" in w for w in warnings), warnings


@pytest.mark.parametrize(
    "text, shown",
    [
        (
            "embedder file /home/alice/.cache/situate/models/bge-small-en-v1.5/model.onnx not found: run x",
            "embedder file model.onnx not found: run x",
        ),
        (
            "model file '/srv/models/a b/nomic.gguf' (SITUATE_EMBED_MODEL) is empty",
            "model file 'nomic.gguf' (SITUATE_EMBED_MODEL) is empty",
        ),
        ("cannot open ~/private/notes/keys.md.", "cannot open keys.md."),
        ("read file:///home/alice/x/table.lance failed", "read table.lance failed"),
        ("the table in /data/team-notes holds 768-wide vectors", "the table in team-notes holds 768-wide vectors"),
        ("fetch https://example.com/a/b and s3://bucket/team/lancedb: 3/4 tokens/s", None),
        # review: Lance prints local paths without their leading "/", and a path may follow ":" directly
        (
            "LanceError(IO): Not found: data/team-notes/lancedb/chunks.lance/_versions/2.manifest",
            "LanceError(IO): Not found: team-notes/lancedb/chunks.lance/_versions/2.manifest",
        ),
        (
            "LanceError(IO): Not found: srv/alice/old/lancedb/chunks.lance/data/f.lance, line 3",
            "LanceError(IO): Not found: chunks.lance/data/f.lance, line 3",
        ),
        ("cannot open:/home/alice/secret.txt; retrying", "cannot open:secret.txt; retrying"),
        ("error:/srv/models/x.gguf", "error:x.gguf"),
    ],
)
def test_redaction_names_every_absolute_path_by_its_last_component(text, shown):
    from situate.service import redact

    assert redact(text, "/data/team-notes", "team-notes") == (text if shown is None else shown)


def test_a_missing_collection_is_named_and_the_others_are_searched(tmp_path):
    """``situate serve --collection good=… --collection gone=<missing folder>``: a search answers
    from ``good`` (an empty table here: no hits, no model needed) and names ``gone`` in
    ``X-Situate-Missing-Collections``; ``/health`` names it by its collection name, not its path."""
    from fastapi.testclient import TestClient

    from situate.resources.store.store import DATA_MARKER
    from situate.service import MISSING_HEADER, create_app

    (tmp_path / "good").mkdir()
    (tmp_path / "good" / DATA_MARKER).write_text("")
    cols = {"good": str(tmp_path / "good"), "gone": str(tmp_path / "unmounted" / "notes")}
    client = TestClient(create_app(collections=cols), base_url="http://127.0.0.1")
    r = client.get("/search", params={"q": "signing keys", "k": 3})
    assert r.status_code == 200 and r.json() == [], r.text
    assert r.headers[MISSING_HEADER] == "gone"
    said = " ".join(v for k, v in r.headers.items() if k.lower().startswith("x-situate-warning"))
    assert "gone: its data folder cannot be read now" in said and "unmounted" not in said
    health = client.get("/health").json()
    assert health["status"] == "degraded" and health["missing"] == ["gone"]
    assert health["collections"]["gone"] == {"status": "no data folder", "home": "gone"}
    assert health["collections"]["good"]["home"] == "good"
    only_gone = TestClient(create_app(collections={"gone": cols["gone"]}), base_url="http://127.0.0.1")
    r = only_gone.get("/search", params={"q": "signing keys"})
    assert r.status_code == 404 and "does not exist" in r.json()["detail"]  # nothing to search: as before
