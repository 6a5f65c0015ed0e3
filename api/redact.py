"""Tenant isolation of decision text: no answer shows another tenant's task id.

Decisions about one task can name other tasks: a victim's ``TaskPreempted`` names its
preemptor and the other victims (in fields, reasons and the decision path), the
``TaskPending`` that queues it again says who preempted it, a ``TaskMigrated`` names the
tasks it preempted. The REST and gRPC answers (``service.py``) and the dashboard
(``ui/``) pass what they show a tenant through :class:`Redactor`, which replaces every id
of a known task of another tenant with :data:`OTHER_TENANT`.
"""
from __future__ import annotations

import re
from typing import Any, Mapping

OTHER_TENANT = "(another tenant's task)"
_TOKEN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@+-]*")


class Redactor:
    """Replaces, in any text or payload, every id of a known task that is not ``tenant``'s.
    ``tasks`` and ``submissions``: task id -> a view with a ``tenant`` attribute."""

    def __init__(self, tasks: Mapping[str, Any], submissions: Mapping[str, Any], tenant: str):
        self.tasks = tasks
        self.submissions = submissions
        self.tenant = tenant
        self._foreign: dict[str, bool] = {}

    def _is_foreign(self, token: str) -> bool:
        known = self._foreign.get(token)
        if known is None:
            view = self.tasks.get(token) or self.submissions.get(token)
            known = self._foreign[token] = view is not None and view.tenant != self.tenant
        return known

    def _token(self, m: re.Match) -> str:
        token = m.group(0)
        if self._is_foreign(token):
            return OTHER_TENANT
        bare = token.rstrip(".:")          # an id at the end of a sentence or before a colon
        if bare != token and self._is_foreign(bare):
            return OTHER_TENANT + token[len(bare):]
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
