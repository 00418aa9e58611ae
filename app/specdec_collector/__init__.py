"""specdec-collector: speculative-decoding acceptance over benchmark windows."""

__version__ = "0.1.0"
