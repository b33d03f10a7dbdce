"""Shared-prefix batching against the sequential path, by batch size, on 8 chunks of python-dotenv's
main.py (the first 7,200 characters) with the default blurb model and settings: how many greedy
blurbs are identical.  Run: ``.venv/bin/python benchmarks/batch_identity.py`` (about 6 min on 2
cores); its output is committed as ``benchmarks/reports/batch-identity.txt``."""

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run as a script from the repository: the imports below need it
from situate.contextual.document_blurbs import STOP  # noqa: E402
from situate.contextual.fitting import prompt_builder  # noqa: E402
from situate.pipelines.settings import resources_from_env  # noqa: E402
from situate.resources.models.batching import SharedPrefixBatcher  # noqa: E402

text = Path(importlib.util.find_spec("dotenv.main").origin).read_text()[:7200]
text = text[: text.rfind("\n") + 1]
n = 8
cuts, size = [0], len(text) // n
for k in range(1, n):
    cuts.append(text.rfind("\n", 0, k * size) + 1)
cuts.append(len(text))
chunks = [text[a:b] for a, b in zip(cuts, cuts[1:])]
llm = resources_from_env(plain=True)["llm"]
b = prompt_builder(llm)
spans = [(text.index(c), text.index(c) + len(c)) for c in chunks]
prefix = b.window_prefix(text, spans, 0, len(text))
suffixes = [b.suffix(c, i) for i, c in enumerate(chunks)]
L = llm.load()
L.reset()
seq = [llm.generate(prefix + s, stop=STOP) for s in suffixes]
print("sequential done", [g.generated for g in seq], flush=True)
L.reset()
seq2 = [llm.generate(prefix + s, stop=STOP) for s in suffixes]
print("sequential again identical:", sum(a.text == c.text for a, c in zip(seq, seq2)), flush=True)
for n_seq in (1, 2, 3, 8):
    bt = SharedPrefixBatcher(
        L,
        n_seq=n_seq,
        n_ctx=llm.n_ctx,
        n_batch=llm.n_batch,
        max_tokens=llm.max_tokens,
        repeat_penalty=llm.repeat_penalty,
        stop=STOP,
    )
    bat = bt.generate(prefix, suffixes)
    bt.close()
    same = [x.text == y.text for x, y in zip(seq, bat)]
    print(n_seq, sum(same), same, flush=True)
    for x, y, s in zip(seq, bat, same):
        if not s:
            print("   SEQ:", x.text[:120].replace("\n", " "), "\n   BAT:", y.text[:120].replace("\n", " "))
