"""tests/widgets."""
