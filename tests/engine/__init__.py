"""tests/engine."""
