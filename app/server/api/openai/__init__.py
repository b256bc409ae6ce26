"""OpenAI's chat completions API as Ollama implements it (`/v1/chat/completions`,
`/v1/completions`, `/v1/embeddings`, `/v1/models`): routes, request schemas, and the
conversion to and from the service's vocabulary that the Responses and Anthropic APIs reuse."""
