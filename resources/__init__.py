"""What keeps state, in three subpackages by what they keep:

* :mod:`situate.resources.store`: the data folder (LanceDB table, BM25 index, stage files, caches, object
  storage and its leases) and search over it;
* :mod:`situate.resources.models`: the local models (the blurb LLM, the embedder, the reranker) and the
  registry that installs and verifies their files;
* :mod:`situate.resources.documents`: document reading (the docs folder, discovery, formats, partition keys).

Nothing here imports an asset or the wiring (``tests/test_layers.py``).
"""
