"""Models of the migration app."""
