"""Suanli streams."""
