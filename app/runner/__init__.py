"""The runner process: one loaded model, its forward passes, the batching loop, prompt-cache
slots, and the HTTP protocol the service talks to it through (protocol/)."""
