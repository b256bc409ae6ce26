"""The inference engine: tensors, GGUF files, tokenizers, caches, runner."""
