"""Tenant isolation of decision text: no answer shows another tenant's task id.

Decisions about one task can name other tasks: a victim's ``TaskPreempted`` names its
preemptor and the other victims (in fields, reasons and the decision path), the
``TaskPending`` that queues it again says who preempted it, a ``TaskMigrated`` names the
tasks it preempted. The REST and gRPC answers (``service.py``) and the dashboard
(``ui/``) pass what they show a tenant through :class:`Redactor`, which replaces every id
of a known task of another tenant with :data:`OTHER_TENANT`, and, when it is given the
reservation fold, every id of another tenant's bid or reservation token (a claimant's
decision path names its token) with :data:`OTHER_RESERVATION`.
"""
from __future__ import annotations

import re
from typing import Any, Mapping

OTHER_TENANT = "(another tenant's task)"
OTHER_TENANT_NAME = "(another tenant)"                  # a tenant shown in a shared list (reservations)
OTHER_RESERVATION = "(another tenant's reservation)"    # a token's and its bid's id, likewise
_TOKEN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@+-]*")


class Redactor:
    """Replaces, in any text or payload, every id of a known task that is not ``tenant``'s.
    ``tasks`` and ``submissions``: task id -> a view with a ``tenant`` attribute."""

    def __init__(self, tasks: Mapping[str, Any], submissions: Mapping[str, Any], tenant: str,
                 reservations: Any = None):
        self.tasks = tasks
        self.submissions = submissions
        self.tenant = tenant
        # ``projections/reservations.ReservationsView`` (its ``bids`` and ``tokens``), or None
        self.bids: Mapping[str, Any] = reservations.bids if reservations is not None else {}
        self.tokens: Mapping[str, Any] = reservations.tokens if reservations is not None else {}
        self._foreign: dict[str, str | None] = {}

    def _is_foreign(self, token: str) -> str | None:
        """What to show instead of ``token``, when it is another tenant's id (None otherwise)."""
        if token in self._foreign:
            return self._foreign[token]
        view = self.tasks.get(token) or self.submissions.get(token)
        shown = None
        if view is not None:
            shown = OTHER_TENANT if view.tenant != self.tenant else None
        else:
            owned = self.tokens.get(token) or self.bids.get(token)
            if owned is not None and owned.tenant != self.tenant:
                shown = OTHER_RESERVATION
        self._foreign[token] = shown
        return shown

    def _token(self, m: re.Match) -> str:
        token = m.group(0)
        shown = self._is_foreign(token)
        if shown:
            return shown
        bare = token.rstrip(".:")          # an id at the end of a sentence or before a colon
        shown = self._is_foreign(bare) if bare != token else None
        if shown:
            return shown + token[len(bare):]
        return token

    def text(self, value: str) -> str:
        return _TOKEN.sub(self._token, value)

    def deep(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {k: self.deep(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [self.deep(v) for v in value]
        return value
