"""Suanli's public API: REST (FastAPI, OpenAPI) and gRPC, over the same operations."""
