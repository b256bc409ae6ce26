"""The runner: forward passes, the batching loop, prompt-cache slots."""
