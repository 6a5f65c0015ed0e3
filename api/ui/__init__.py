"""The operator's console: a live web dashboard served by the API process under ``/ui``.

Front end: pages rendered on the server from the API's read model (plain HTML, escaped in
``views.py``, no template engine), one stylesheet and one small vanilla script
(``static/``), no build step and nothing fetched from elsewhere at run time (the pages'
Content-Security-Policy allows only this origin). The script keeps a page current from a
server-sent event stream (``/ui/events``): the cluster page applies node changes in place,
the other pages re-read their part when it changed.

- ``state.py``: what the dashboard adds to the read model (node places and conditions,
  per-tenant counts, change logs), fed by a listener on ``ReadModel.apply``;
- ``views.py``: the pages; ``tree.py``: a decision's tree as SVG (the ``explain`` data);
- ``routes.py``: sign-in (a tenant's API token in an HttpOnly cookie), pages, the stream.

Pages: ``/ui/`` (cluster: nodes by zone and site, GPU heat map, health and conditions,
your placed and pending counts), ``/ui/queues`` (your pending tasks by cell, QoS tier and
position, with reasons), ``/ui/tasks`` and ``/ui/tasks/{id}`` (lifecycle, decision tree,
audit records with their log offsets). A token sees its own tenant's tasks only; nodes are
shared by all tenants, as in ``GET /v1/nodes``.
"""
from suanli.api.ui.routes import Dashboard

__all__ = ["Dashboard"]
