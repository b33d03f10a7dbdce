"""Document reading: the docs folder, discovery and text extraction, safe file reads, partition keys."""
