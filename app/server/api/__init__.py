"""The HTTP APIs, a package per family: `ollama` (the native routes), `openai` (chat
completions), `responses` (OpenAI's Responses), `anthropic` (Messages) and `hearth` (Hearth's
own `/api/hearth/*`); `shared` holds what they all use (the chat prompt, error answers, access
rules, disconnects, streams). `hearth.server.app` includes each family's router."""
