"""Reusable widgets: message bubbles, the composer, the markdown view, small controls."""
