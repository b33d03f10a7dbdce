"""Memory of reading blurb files (issue 32, findings 3 and 4): a hostile file against a real one.

Each case is read by :func:`situate.contextual.blurb_files.read` in a fresh Python process, which reports its
peak resident set (``ru_maxrss``, KiB on Linux) before and after the read, so the figure is the
read's own and not this process's.  Cases:

* ``committed``: the largest committed blurb file (``benchmarks/blurbs/``, 737 lines);
* ``large``: 100,000 valid lines (about 110 MB decompressed), the size of a big corpus;
* ``at the bound``: valid lines with 30,000-character raw texts up to just under
  :data:`MAX_DECOMPRESSED_BYTES` (the most a file can make a read keep);
* ``at the bound, one emoji a line``: the same with a character outside the BMP opening each raw
  text (kept as UTF-8, it costs what it takes in the file; a ``str`` would take 4 bytes a
  character);
* ``small lines at the bound``: the same with one-character raw texts (about 810,000 lines: the
  most entries a file can make a read keep);
* ``bomb``: one 400 MB line compressed to about 0.4 MB (refused at :data:`MAX_DECOMPRESSED_BYTES`);
* ``long lines``: 600 lines of 1 MB each (rejected one by one, then refused at the bound).

Run: ``.venv/bin/python benchmarks/blurb_file_bounds.py`` (about a minute on 2 cores); writes
``benchmarks/reports/blurb-file-bounds.{json,md}``.
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

_CHILD = r"""
import json, resource, sys, time
from situate.contextual import blurb_files
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t0 = time.perf_counter()
try:
    f = blurb_files.read(sys.argv[1])
    out = {"kept": len(f), "lines": f.lines, "rejected": f.rejected, "error": ""}
except blurb_files.BlurbFileError as e:
    out = {"error": str(e).split(": ", 1)[-1]}
out["seconds"] = round(time.perf_counter() - t0, 2)
out["peak_rss_mib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
out["rss_growth_mib"] = round((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024, 1)
print(json.dumps(out))
"""


def _line(i: int, raw_chars: int = 700, astral: bool = False) -> bytes:
    sha = f"{i:064x}"
    raw = (f"This chunk is about section {i} of the guide, " + "and its context " * (raw_chars // 16))[:raw_chars]
    if astral:  # one character outside the BMP: a Python str of it takes 4 bytes a character
        raw = "\U0001f600" + raw[1:]
    return (
        json.dumps(
            {
                "chunk_id": f"doc:{i}",
                "doc_id": "doc",
                "text_sha256": sha,
                "doc_sha256": "b" * 64,
                "mode": "chunk:anthropic-2024-primed-about",
                "model_sha256": "c" * 64,
                "raw": raw,
                "blurb": "",
                "status": "model",
            }
        )
        + "\n"
    ).encode()


def cases(tmp: Path) -> dict[str, Path]:
    """The files read (see the module docstring)."""
    committed = max((ROOT / "benchmarks" / "blurbs").glob("*.jsonl.gz"), key=lambda p: p.stat().st_size)
    large, bomb, long = tmp / "large.jsonl.gz", tmp / "bomb.jsonl.gz", tmp / "long.jsonl.gz"
    full = tmp / "full.jsonl.gz"
    with gzip.open(large, "wb", compresslevel=1) as f:
        for i in range(100_000):
            f.write(_line(i))
    from situate.contextual.blurb_files import MAX_DECOMPRESSED_BYTES

    with gzip.open(full, "wb", compresslevel=1) as f:
        written, i = 0, 0
        while written + len(_line(i, 30_000)) <= MAX_DECOMPRESSED_BYTES:
            written += f.write(_line(i, 30_000))
            i += 1
    with gzip.open(bomb, "wb", compresslevel=9) as f:
        for _ in range(400):
            f.write(b"a" * (1 << 20))
        f.write(b"\n")
    with gzip.open(long, "wb", compresslevel=9) as f:
        for _ in range(600):
            f.write(b"b" * (1 << 20) + b"\n")
    astral = tmp / "astral.jsonl.gz"
    with gzip.open(astral, "wb", compresslevel=1) as f:
        written, i = 0, 0
        while written + len(_line(i, 30_000, True)) <= MAX_DECOMPRESSED_BYTES:
            written += f.write(_line(i, 30_000, True))
            i += 1
    small = tmp / "small.jsonl.gz"
    with gzip.open(small, "wb", compresslevel=1) as f:
        written, i = 0, 0
        while written + len(_line(i, 1)) <= MAX_DECOMPRESSED_BYTES:
            written += f.write(_line(i, 1))
            i += 1
    return {
        "committed": committed,
        "large": large,
        "at the bound": full,
        "at the bound, one emoji a line": astral,
        "small lines at the bound": small,
        "bomb": bomb,
        "long lines": long,
    }


def measure() -> dict:
    """Each case's figures from a fresh process (see the module docstring)."""
    from situate.contextual import blurb_files

    out = {
        "bounds": {
            "MAX_FILE_BYTES": blurb_files.MAX_FILE_BYTES,
            "MAX_DECOMPRESSED_BYTES": blurb_files.MAX_DECOMPRESSED_BYTES,
            "MAX_LINE_BYTES": blurb_files.MAX_LINE_BYTES,
            "MAX_RAW_CHARS": blurb_files.MAX_RAW_CHARS,
        },
        "cases": {},
    }
    with tempfile.TemporaryDirectory() as d:
        for name, path in cases(Path(d)).items():
            res = subprocess.run(
                [sys.executable, "-c", _CHILD, str(path)], capture_output=True, text=True, cwd=ROOT, check=True
            )
            out["cases"][name] = {"compressed_bytes": path.stat().st_size, **json.loads(res.stdout)}
    return out


def markdown(res: dict) -> str:
    rows = [
        "| file | compressed | result | peak RSS (MiB) | growth in the read (MiB) | s |",
        "|---|---|---|---|---|---|",
    ]
    for name, c in res["cases"].items():
        what = (
            f"refused: {c['error']}"
            if c["error"]
            else f"{c['kept']:,} kept of {c['lines']:,} lines, {c['rejected']:,} rejected"
        )
        rows.append(
            f"| {name} | {c['compressed_bytes']:,} B | {what} | {c['peak_rss_mib']} | "
            f"{c['rss_growth_mib']} | {c['seconds']} |"
        )
    b = res["bounds"]
    return (
        "# Blurb file bounds: memory of a read\n\n"
        f"Bounds: {b['MAX_FILE_BYTES']:,} bytes compressed, {b['MAX_DECOMPRESSED_BYTES']:,} decompressed, "
        f"{b['MAX_LINE_BYTES']:,} a line, {b['MAX_RAW_CHARS']:,} characters a field.  Each file read in a "
        f"fresh process (`benchmarks/blurb_file_bounds.py`, {res['date']}).\n\n" + "\n".join(rows) + "\n"
    )


def main() -> None:
    sys.path.insert(0, str(ROOT))
    res = measure() | {"date": time.strftime("%Y-%m-%d")}
    reports = ROOT / "benchmarks" / "reports"
    (reports / "blurb-file-bounds.json").write_text(json.dumps(res, indent=2) + "\n")
    (reports / "blurb-file-bounds.md").write_text(markdown(res))
    print(markdown(res))


if __name__ == "__main__":
    main()
