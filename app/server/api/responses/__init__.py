"""OpenAI's Responses API (`/v1/responses`): routes, request schema, conversion of input items
into chat messages, and the in-memory store of responses."""
