"""Kubernetes integration: manifest rendering (``manifests``) and the cluster backends."""
