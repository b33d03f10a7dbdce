"""What keeps state: the models, the store (LanceDB table, BM25 index) and search."""
