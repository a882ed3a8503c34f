"""Models of the rollout app."""
