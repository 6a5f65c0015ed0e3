"""Suanli projections."""
