"""Fixtures of the library's tests (the session settings shared with the study's tests are in ../conftest.py)."""
