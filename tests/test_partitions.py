import pytest

from situate.assets.partitions import KEY_PATTERN, PartitionKeyError, decode_key, encode_key

SOURCES = [
    "README.md",
    "docs/getting_started.md",
    "a b/c,d|e.txt",
    "weird...name..txt",
    "../escape",
    "ünïcödé/文書.md",
    "codebase_chunks.json#doc_70",
    "tab\there",
    "x/.hidden/..y",
    "_",
    "__init__.py",
]


@pytest.mark.parametrize("source", SOURCES)
def test_roundtrip_and_safe_charset(source):
    key = encode_key(source)
    assert KEY_PATTERN.match(key), key
    assert ".." not in key and "," not in key and "|" not in key
    assert decode_key(key) == source


def test_readable_examples():
    assert encode_key("docs/getting_started.md") == "docs_.getting__started.md"
    assert encode_key("codebase_chunks.json#doc_70") == "codebase__chunks.json_23doc__70"


def test_distinct_sources_give_distinct_keys():
    keys = {encode_key(s) for s in SOURCES}
    assert len(keys) == len(SOURCES)
    assert encode_key("a/b") != encode_key("a_b") != encode_key("a.b")


@pytest.mark.parametrize("bad", ["has space", "a,b", "_Z1", "_", "caf_C3", ""])
def test_decode_rejects_malformed(bad):
    with pytest.raises(PartitionKeyError):
        decode_key(bad)


def test_empty_source_rejected():
    with pytest.raises(PartitionKeyError):
        encode_key("")
