"""Mine (description, code) training pairs from the Python code installed here: the standard
library (without its test suites) and the set-up's site-packages, every function of the
evaluation corpora excluded (:mod:`situate.evaluation.code_pairs`).

    python -m benchmarks.code_pairs --out benchmarks/reports/code-pairs

Writes ``OUT.jsonl.gz`` (the pairs, each with its split) and ``OUT.json`` / ``OUT.md`` (the counts,
the exclusion, the seconds it took, the pairs file's sha256 and the Python and package versions
it was mined from: another set-up mines another set).
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import sys
import sysconfig
import time
from pathlib import Path

from situate.evaluation.code_pairs import eval_hashes, mine
from situate.evaluation.data import SETS, corpus_file

#: Folders of the standard library left out: test suites (their functions test, they do not
#: document), the IDE and the demo scripts.
STDLIB_SKIP = {"test", "tests", "idlelib", "turtledemo", "lib2to3", "site-packages", "__pycache__"}


def source_files() -> list[Path]:
    """The standard library's and site-packages' ``.py`` files, sorted, without test folders."""
    roots = [Path(sysconfig.get_paths()["stdlib"]), Path(sysconfig.get_paths()["purelib"])]
    out = []
    for root in roots:
        for p in root.rglob("*.py"):
            parts = set(p.relative_to(root).parts[:-1])
            if not parts & STDLIB_SKIP:
                out.append(p)
    return sorted(set(out))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="path without extension")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    excluded = eval_hashes(corpus_file(s) for s in SETS)
    files = source_files()
    pairs, counts = mine(files, excluded)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    data = "".join(json.dumps(p, ensure_ascii=False) + "\n" for p in pairs).encode()
    with gzip.GzipFile(out.with_suffix(".jsonl.gz"), "wb", mtime=0) as f:
        f.write(data)
    report = {
        **counts,
        "eval_hashes": len(excluded),
        "seconds": round(time.perf_counter() - t0, 1),
        "sha256_of_pairs": hashlib.sha256(data).hexdigest(),
        "python": sys.version.split()[0],
    }
    out.with_suffix(".json").write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
