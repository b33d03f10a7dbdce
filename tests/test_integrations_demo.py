"""The LangChain and LlamaIndex retrievers on the demo corpus (tiktoken's and lancedb's READMEs,
dotenv's ``main.py``, as ``make demo`` builds it), with the real default models and the real
libraries: each of the demo's three questions gets its right file first through both.

Settings are the end-to-end tests' small ones (``n_ctx`` 768, 120-token chunks, 24-token blurbs),
so the ingest takes minutes on 2 cores; the documents are whole.
"""

import os

import pytest
from conftest import needs_models, small_settings

pytestmark = [needs_models, pytest.mark.models]


@pytest.fixture(scope="module")
def demo_home(tmp_path_factory):
    from situate.pipelines.demo import build_demo_corpus
    from situate.pipelines.operations import ingest
    from situate.pipelines.settings import restored_env

    docs, home = tmp_path_factory.mktemp("demo-docs"), tmp_path_factory.mktemp("demo-home")
    build_demo_corpus(docs)
    settings = small_settings(docs, home, context=None)  # situate's default mode, as make demo runs
    with restored_env(tuple(settings)):
        os.environ.update(settings)
        summary = ingest(str(docs), str(home), echo=lambda *_: None)
        assert summary.failed == {} and summary.ingested == 3
        yield str(home)


def test_both_retrievers_put_the_right_demo_file_first(demo_home):
    from langchain_core.documents import Document
    from llama_index.core.schema import NodeWithScore

    from situate.integrations.langchain import SituateRetriever as LangChainRetriever
    from situate.integrations.llamaindex import SituateRetriever as LlamaIndexRetriever
    from situate.pipelines.demo import QUERIES

    expected = ["tiktoken-README.md", "lancedb-README.md", "dotenv-main.py"]  # QUERIES' order (situate.pipelines.demo)
    for query, source in zip(QUERIES, expected):
        docs = LangChainRetriever(home=demo_home, k=3).invoke(query)
        assert isinstance(docs[0], Document) and docs[0].metadata["source"] == source, (query, docs[0].metadata)
        assert docs[0].metadata["blurb"] or docs[0].metadata["context"]
        nodes = LlamaIndexRetriever(home=demo_home, k=3).retrieve(query)
        assert isinstance(nodes[0], NodeWithScore) and nodes[0].node.metadata["source"] == source
        assert nodes[0].node.node_id == docs[0].id
