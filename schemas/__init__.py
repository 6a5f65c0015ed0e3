"""Suanli schemas."""
