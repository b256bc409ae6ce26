"""The model store: content-addressed blobs, manifests per name, names that cannot escape the
store, importing an Ollama installation, and what a model file says without loading it."""
