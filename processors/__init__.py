"""Suanli processors."""
