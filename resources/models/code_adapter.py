"""A query-side linear map for code search: the query's vector is mapped by a learnt matrix before it
is compared with code chunks' vectors; prose chunks keep the plain query vector.

bge-small-en-v1.5 was trained on English; a developer's web-style search ("python check if a
variable is iterable") and the function that answers it meet less well than two English passages.
The matrix ``W`` (float32[width, width], near the identity) is learnt on this machine's own code:
functions mined from the standard library and the set-up's site-packages, every function of the
evaluation corpora excluded (:mod:`situate.evaluation.code_pairs`), each paired with the web search
a developer would type for it, written by the local coder model from the function's docstring
(``python -m benchmarks.code_adapter``, which re-makes the shipped file; docs/quality.md, "Code
search: a query map learnt from installed code").  The documents' vectors are not changed, so
switching it (``SITUATE_CODE_ADAPTER``) re-embeds nothing.

Examples
--------
>>> a = CodeAdapter(np.eye(2, dtype=np.float32), "identity")
>>> a.apply(np.array([3.0, 4.0], dtype=np.float32)).tolist()
[0.6000000238418579, 0.800000011920929]
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
from pathlib import Path

import numpy as np

#: The shipped map of each named embedder that has one (``.npy``, float32, C order).
ADAPTERS: dict[str, Path] = {
    "bge-small-en-v1.5": Path(__file__).with_name("data") / "code-adapter-bge-small-en-v1.5.npy",
}
#: Largest adapter file read, bytes: a 1,024-wide matrix of float32 and the ``.npy`` header.
MAX_BYTES = 1024 * 1024 * 4 + 4096


@dataclasses.dataclass(frozen=True)
class CodeAdapter:
    """A learnt query map.

    Attributes
    ----------
    matrix : float32[width, width]
        ``W``: a query vector ``q`` (float32[width], L2-normalised) becomes ``normalise(q @ W)``.
    sha256 : str
        The file's sha256 (hex), recorded where the search says which first stage it used.
    """

    matrix: np.ndarray
    sha256: str

    def apply(self, query_vector: np.ndarray) -> np.ndarray:
        """``normalise(query_vector @ W)``, float32[width]."""
        v = np.asarray(query_vector, dtype=np.float32) @ self.matrix
        return (v / max(float(np.linalg.norm(v)), 1e-12)).astype(np.float32)


#: Smallest singular value of a map accepted: below it some query is sent to (nearly) nothing, and
#: every code chunk would score the same.  The shipped map's is far above it (a near-identity).
MIN_SINGULAR = 1e-3


def load_adapter(path: str, width: int) -> CodeAdapter:
    """The adapter in the ``.npy`` file ``path``, checked before use (it is read from disk); kept
    while the file's size and modification time are the same.

    Raises
    ------
    ValueError
        Naming ``path``: not a regular file, larger than :data:`MAX_BYTES`, not a plain ``.npy``
        array (pickled objects are refused), not float32 of shape ``(width, width)``, not finite, or
        degenerate (a singular value below :data:`MIN_SINGULAR`).
    FileNotFoundError
        ``path`` does not exist.
    """
    p = Path(path)
    st = p.stat()
    if not p.is_file():
        raise ValueError(f"code adapter {p}: not a file")
    return _loaded(str(p), width, st.st_size, st.st_mtime_ns)


@functools.lru_cache(maxsize=4)
def _loaded(path: str, width: int, size: int, mtime_ns: int) -> CodeAdapter:
    """:func:`load_adapter`'s read and checks, once per file version."""
    p = Path(path)
    if size > MAX_BYTES:
        raise ValueError(f"code adapter {p}: {size} bytes, more than the {MAX_BYTES} an adapter can have")
    raw = p.read_bytes()
    try:
        import io

        matrix = np.load(io.BytesIO(raw), allow_pickle=False)
    except (ValueError, EOFError, OSError) as e:
        raise ValueError(f"code adapter {p}: not a .npy array ({e or type(e).__name__})") from e
    if not isinstance(matrix, np.ndarray) or matrix.dtype != np.float32 or matrix.shape != (width, width):
        raise ValueError(
            f"code adapter {p}: {getattr(matrix, 'dtype', type(matrix).__name__)} of shape "
            f"{getattr(matrix, 'shape', '?')}, not float32 ({width}, {width}) for this embedder's vectors"
        )
    if not np.isfinite(matrix).all():
        raise ValueError(f"code adapter {p}: holds values that are not finite")
    smallest = float(np.linalg.svd(matrix.astype(np.float64), compute_uv=False).min())
    if smallest < MIN_SINGULAR:
        raise ValueError(f"code adapter {p}: degenerate (smallest singular value {smallest:.3g}, below {MIN_SINGULAR})")
    return CodeAdapter(np.ascontiguousarray(matrix), hashlib.sha256(raw).hexdigest())
