"""Hearth's own endpoints under `/api/hearth/` (`/api/hearth/search` is with `/api/pull`, in
`ollama.pull`)."""
