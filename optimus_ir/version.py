"""The package version (the FX-graph cache keys hold it with a hash of the sources)."""

__version__ = "0.1.0"
