"""engine/dialects."""
