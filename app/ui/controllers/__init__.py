"""Controllers: the app's logic. Views call them and listen to their signals; they never
build widgets (dialogs that ask the user something live in the views)."""
