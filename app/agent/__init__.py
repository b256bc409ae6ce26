"""Tools for models: an MCP client (`hub`), its config (`config`) and the agent loop (`loop`).

Qt-free and HTTP-free, so the desktop app and `hearth run --tools` share it: the caller brings
the model turn (`loop.ChatStep`) and the approval (`loop.Approve`).
"""
