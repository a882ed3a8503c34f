"""Models of the quotas app."""
