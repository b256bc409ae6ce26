"""Anthropic's Messages API (`/v1/messages`, `/v1/messages/count_tokens`): routes, request
schemas and conversion."""
