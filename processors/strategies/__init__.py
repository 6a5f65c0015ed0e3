"""Scheduling strategies."""
