"""The data folder: the LanceDB table, the BM25 index, stage files, content caches, object storage and leases,
and search."""
