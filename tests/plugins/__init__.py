"""pytest plugins shared by the test areas (listed in tests/conftest.py as "plugins.<name>")."""
