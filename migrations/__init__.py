"""Alembic migrations of the specdec-collector schema (shipped inside the package)."""
