"""The desktop app (PySide6 Widgets): an HTTP client of `hearth serve`, never of the engine.

Layout: `app.py` is the composition root, `client.py` the HTTP client, `service.py` starts or
attaches to the service, `history/` the SQLite chat store, `models/` Qt item models,
`controllers/` the logic, `views/` and `widgets/` the layout.
"""
