"""The local models: the blurb LLM and the embedder (llama.cpp), shared-prefix batching, the reranker (ONNX),
and the registry of installable model files."""
