"""Helpers the test modules share (imported as `support.<module>`: tests/conftest.py puts
tests/ on the path). A test module imports helpers from here or its folder's helper modules,
never from another test module."""
