"""A LangChain retriever over a situate index (``pip install 'situate[langchain]'``).

Examples
--------
>>> from situate.integrations.langchain import SituateRetriever       # doctest: +SKIP
>>> retriever = SituateRetriever(home="docs-home", k=5)                # doctest: +SKIP
>>> docs = retriever.invoke("how do I rotate the keys?")               # doctest: +SKIP
>>> docs[0].metadata["source"], docs[0].metadata["blurb"]              # doctest: +SKIP
('ops/keys.md', 'This chunk is about rotating the signing keys ...')
"""

from __future__ import annotations

from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever

import situate
from situate.integrations import hit_metadata


class SituateRetriever(BaseRetriever):
    """``langchain_core.retrievers.BaseRetriever`` over :func:`situate.search`.

    Each hit becomes a ``Document`` whose ``page_content`` is the chunk text and whose metadata
    holds the source, chunk index, the blurb and the structural context
    (:func:`situate.integrations.hit_metadata`).

    Attributes
    ----------
    home : str or None
        The data folder (default ``$SITUATE_HOME``, else ``./.situate``).
    k : int
        Documents returned (default 4, LangChain's usual).
    rerank : int or None
        Candidates the cross-encoder reranks (None: ``SITUATE_RERANK_DEPTH``, else off).
    collections : dict or None
        Collection name → data folder, searched together instead of ``home`` (hits fused by RRF,
        each naming its collection in its metadata).
    """

    home: str | None = None
    k: int = 4
    rerank: int | None = None
    collections: dict[str, str] | None = None

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun) -> list[Document]:
        hits = situate.search(query, k=self.k, rerank=self.rerank, home=self.home, collections=self.collections)
        return [Document(page_content=h.text, metadata=hit_metadata(h), id=h.chunk_id) for h in hits]
