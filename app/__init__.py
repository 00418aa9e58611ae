"""specdec-collector: speculative-decoding metrics over benchmark windows."""

__version__ = "0.1.0"
