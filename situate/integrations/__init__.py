"""Retrievers for RAG frameworks over a situate index, in optional extras:
``pip install 'situate[langchain]'`` (:mod:`situate.integrations.langchain`) and
``pip install 'situate[llamaindex]'`` (:mod:`situate.integrations.llamaindex`)."""


def hit_metadata(hit) -> dict:
    """The metadata both retrievers attach to a hit's document or node: where it comes from and
    what situates it (``source``, ``location`` (``source:start-end``), ``start_line``,
    ``end_line``, ``chunk_id``, ``doc_id``, ``chunk_index``, ``blurb``, ``context``, ``rank``,
    ``score``, ``rerank_score``, and ``collection`` in a search of several)."""
    return {
        "source": hit.source,
        "location": hit.location,
        "start_line": hit.start_line,
        "end_line": hit.end_line,
        "chunk_id": hit.chunk_id,
        "doc_id": hit.doc_id,
        "chunk_index": hit.chunk_index,
        "blurb": hit.blurb,
        "context": hit.context,
        "rank": hit.rank,
        "score": hit.score,
        "rerank_score": hit.rerank_score,
        **({"first_stage_rank": hit.first_stage_rank, "rerank_rank": hit.rerank_rank} if hit.rerank_rank else {}),
        **({"collection": hit.collection} if hit.collection else {}),
    }
