"""A LlamaIndex retriever over a situate index (``pip install 'situate[llamaindex]'``).

Examples
--------
>>> from situate.integrations.llamaindex import SituateRetriever      # doctest: +SKIP
>>> nodes = SituateRetriever(home="docs-home", k=5).retrieve("how do I rotate the keys?")  # doctest: +SKIP
>>> nodes[0].node.metadata["source"], nodes[0].score                   # doctest: +SKIP
('ops/keys.md', 0.0325)
"""

from __future__ import annotations

from llama_index.core.retrievers import BaseRetriever
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

import situate
from situate.integrations import hit_metadata


class SituateRetriever(BaseRetriever):
    """``llama_index.core.retrievers.BaseRetriever`` over :func:`situate.search`.

    Each hit becomes a ``NodeWithScore``: a ``TextNode`` (``id_`` the chunk id, ``text`` the
    chunk) with the source, blurb and structural context in its metadata
    (:func:`situate.integrations.hit_metadata`), scored by the fused RRF score (the rerank
    score's order when reranked).

    Parameters
    ----------
    home : str, optional
        The data folder (default ``$SITUATE_HOME``, else ``./.situate``).
    k : int
        Nodes returned (default 10).
    rerank : int, optional
        Candidates the cross-encoder reranks (None: ``SITUATE_RERANK_DEPTH``, else off).
    collections : dict, optional
        Collection name → data folder, searched together instead of ``home`` (hits fused by RRF,
        each naming its collection in its metadata).
    """

    def __init__(
        self,
        home: str | None = None,
        k: int = 10,
        rerank: int | None = None,
        collections: dict[str, str] | None = None,
        **kwargs,
    ) -> None:
        super().__init__(**kwargs)
        self.home, self.k, self.rerank, self.collections = home, k, rerank, collections

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        hits = situate.search(
            query_bundle.query_str, k=self.k, rerank=self.rerank, home=self.home, collections=self.collections
        )
        return [
            NodeWithScore(
                node=TextNode(
                    id_=h.chunk_id,
                    text=h.text,
                    metadata=hit_metadata(h),
                    excluded_embed_metadata_keys=list(hit_metadata(h)),
                    excluded_llm_metadata_keys=["chunk_id", "rank", "score", "rerank_score"],
                ),
                score=h.score,
            )
            for h in hits
        ]
