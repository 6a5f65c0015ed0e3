"""Suanli replay."""
