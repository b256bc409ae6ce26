"""The engine service: HTTP APIs, model store, scheduler, chat templates."""
