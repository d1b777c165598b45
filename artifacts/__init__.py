"""The artifact store (see README.md in this folder)."""

from artifacts.store import ArtifactRef, Store

__all__ = ["ArtifactRef", "Store"]
