"""Suanli's public API: REST (FastAPI, OpenAPI) and gRPC, over the same operations.

Modules (each transport is thin; the operations live once, in ``service.py``):

- ``models.py``: the pydantic request/response models (requests reuse ``schemas/task_spec``);
- ``service.py``: the operations, validation before any write, tenant isolation, the error contract;
- ``readmodel.py``: the background fold of the namespace's log that reads are answered from;
- ``audit.py``: the ``AuditSource`` interface the audit endpoints read decisions through;
- ``sink.py``: writes onto the raw topics exactly as a direct producer does;
- ``auth.py``: API tokens (``SUANLI_API_TOKENS``: a TOML or JSON file, token -> tenant);
- ``rest.py`` and ``grpc_server.py``: the two transports; ``server.py``: ``suanli api serve``;
- ``suanli_pb2*.py``: stubs generated from ``schemas/proto/suanli.proto`` by ``protogen.py``.
"""
