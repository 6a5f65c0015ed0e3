"""Subcommands of the ``suanli`` CLI (registered by ``suanli.cli.build_parser``)."""
from __future__ import annotations

import argparse


def add_commands(sub: argparse._SubParsersAction) -> None:
    """Register this module's subcommands on the top-level parser."""
