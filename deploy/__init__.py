"""Suanli deploy."""
