"""``suanli profile TASK [--json]``: the task's profile (C9) as its latest decision carries it.

The profile is read from the provenance of the task's decisions on the decisions topic
(``processors/profiler.py`` makes it while the cell's policy has ``profiles.enabled``);
:func:`render_profile` prints each dimension with its value and its meaning from the
TaskProfile schema, grouped by where it comes from.
"""
from __future__ import annotations

import argparse
import json
from functools import cache
from typing import Any

from suanli.errors import SuanliError

GROUPS = ("declared", "learnt", "live", "cell", "derived")


@cache
def dimension_docs() -> dict[str, str]:
    """Field name -> its doc in ``TaskProfile.avsc``."""
    from suanli.schemas.catalog import AVRO_DIR
    schema = json.loads((AVRO_DIR / "io.suanli.events.TaskProfile.avsc").read_text())
    return {f["name"]: f.get("doc", "") for f in schema["fields"]}


def latest_profile(decisions: list[tuple[str, dict]]) -> dict[str, Any] | None:
    """The profile of the latest decision that carries one (decisions in log order)."""
    for _kind, payload in reversed(decisions):
        prof = (payload.get("provenance") or {}).get("profile")
        if prof is not None:
            return prof
    return None


def render_profile(task_id: str, profile: dict[str, Any]) -> str:
    """A readable profile: a header, then each dimension by group, with value and meaning."""
    docs = dimension_docs()
    lines = [f"task {task_id}: signature {profile.get('signature') or '?'}",
             f"  learnt from: {profile.get('history_level') or '?'} "
             f"({int(profile.get('history_runs') or 0)} runs); {profile.get('dims_filled', 0)} dimensions observed"]
    by_group: dict[str, list[str]] = {g: [] for g in (*GROUPS, "other")}
    for name, value in profile.items():
        if name in ("signature", "history_level", "dims_filled", "extra"):
            continue
        doc = docs.get(name, "")
        first = doc.split(" ", 1)[0].rstrip(":")
        group, meaning = (first, doc.partition(": ")[2]) if first in GROUPS else ("other", doc)
        shown = f"{value:.4g}" if isinstance(value, float) else json.dumps(value)
        by_group.setdefault(group, []).append(f"    {name:<26} {shown:>12}  {meaning}")
    for group in (*GROUPS, "other"):
        if by_group.get(group):
            lines.append(f"  {group}:")
            lines.extend(by_group[group])
    return "\n".join(lines) + "\n"


def _profile(args: argparse.Namespace) -> int:
    from suanli.cli_strategy import _read_decisions

    decisions = _read_decisions(args.task, args.timeout)
    if not decisions:
        raise SuanliError(f"no decisions for task {args.task!r} on the decisions topic")
    prof = latest_profile(decisions)
    if prof is None:
        raise SuanliError(f"task {args.task!r} has decisions but no profile: its cell's policy has profiles off "
                          "(turn them on with a policy config {\"profiles\": {\"enabled\": true}})")
    print(json.dumps(prof, indent=2, sort_keys=True) if args.json else render_profile(args.task, prof), end="")
    if args.json:
        print()
    return 0


def add_commands(sub: argparse._SubParsersAction) -> None:
    """Register ``suanli profile``."""
    from suanli.cli_services import STACK

    p = sub.add_parser("profile", help="a task's profile: declared, learnt from its signature's history, live "
                                       "usage, the cell, derived classes (C9)")
    p.add_argument("task", help="task id")
    p.add_argument("--json", action="store_true", help="the profile as JSON")
    p.add_argument("--timeout", type=float, default=60.0,
                    help="seconds to wait for the decisions topic to be read up to its end (default 60)")
    p.set_defaults(func=_profile, needs=STACK)
