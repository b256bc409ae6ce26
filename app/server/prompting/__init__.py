"""Prompt building: chat templates (sandboxed), the conversation rendered into a prompt, images
checked before any model sees them, and generated text parsed back into content and tool calls."""
