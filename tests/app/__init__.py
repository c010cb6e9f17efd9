"""tests/app."""
