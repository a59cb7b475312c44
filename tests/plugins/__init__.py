"""pytest plugins and shared test helpers, not tests (and not Ansible plugins): README.md.

The plugins are listed in tests/conftest.py as "plugins.<name>"; the helpers are
imported by the test areas as ``plugins.<name>``.
"""
