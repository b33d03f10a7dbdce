"""Training pairs mined from installed code (situate.evaluation.code_pairs): what a pair is, and
that a function of an evaluation corpus never becomes one (the exclusion computed from the
corpora themselves, on a real CoSQA function and one of the cookbook's)."""

import ast
import json

from situate.evaluation.code_pairs import eval_hashes, functions, mine
from situate.evaluation.data import corpus_file

MODULE = '''
import os


def join_all(parts, sep=", "):
    """Join the string forms of parts with a separator between each two."""
    out = []
    for p in parts:
        out.append(str(p))
    return sep.join(out)


def nothing():
    """Do nothing at all, as a placeholder."""
    pass


def short():
    """Short."""
    return os.sep + os.sep
'''


def test_a_pair_is_the_first_sentence_and_the_code_without_its_docstring():
    got = list(functions(MODULE))
    assert [(n, d) for n, d, _ in got] == [
        ("join_all", "Join the string forms of parts with a separator between each two.")
    ]
    code = got[0][2]
    assert code.startswith('def join_all(parts, sep=", "):\n    out = []') and '"""' not in code


def _parses(text: str) -> bool:
    try:
        ast.parse(text)
        return True
    except SyntaxError:
        return False


def test_no_function_of_an_evaluation_corpus_is_mined(tmp_path):
    """A documented CoSQA function, the same re-indented inside a class with comments added, and a
    documented Python file of the cookbook's codebase set are excluded and counted; a new function
    is kept."""
    cosqa = [e["content"] for e in json.loads(corpus_file("cosqa").read_text())]
    documented = next(c for c in cosqa if list(functions(c)) and _parses(c))
    codebase = [e["content"] for e in json.loads(corpus_file("codebase").read_text())]
    python_file = next(c for c in codebase if _parses(c) and list(functions(c)))
    lines = documented.splitlines()

    def moved(x: str) -> str:  # indented into a class, a comment after each code line
        code = x.strip() and not x.strip().startswith(('"', "'"))
        return f"    {x}  # moved" if code else f"    {x}"

    indented = "class Box:\n" + "\n".join(moved(x) for x in lines)
    fresh = (
        'def brand_new(a, b):\n    """Return the larger of two numbers, a when equal."""\n'
        "    if a >= b:\n        return a\n    return b\n"
    )
    files = {"cosqa.py": documented, "moved.py": indented, "cookbook.py": python_file, "fresh.py": fresh}
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    excluded = eval_hashes([corpus_file(s) for s in ("cosqa", "codebase")])
    assert len(excluded) > 6267
    pairs, counts = mine([tmp_path / n for n in files], excluded)
    assert [p["code"].split("(")[0] for p in pairs] == ["def brand_new"]
    assert counts["excluded_eval"] == 2 + len(list(functions(python_file))) and counts["pairs"] == 1
