"""Alembic migrations of the pi-store schema (reviewed by hand, never applied blindly)."""
