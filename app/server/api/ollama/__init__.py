"""Ollama's native API: generation (`/api/generate`, `/api/chat`, `/api/embed`), model
management (`models`), `/api/create` and blobs (`create`), `/api/pull` (`pull`), and the
request schemas (`schemas`, whose `HearthExtensions` the `/v1` families take too)."""
