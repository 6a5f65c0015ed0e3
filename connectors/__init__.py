"""Suanli connectors."""
