"""The HTTP APIs: Ollama's native routes, the OpenAI-compatible routes, their request schemas,
error answers and access rules."""
