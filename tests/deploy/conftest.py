"""Fixtures of the deploy tests."""
from __future__ import annotations

import pytest

from suanli.deploy import kubernetes as kube


@pytest.fixture(scope="module")
def apiserver(stack):
    """The loopback Kubernetes control plane (etcd, kube-apiserver, kwok): started here when
    not running, and then stopped after the module; its settings."""
    report = kube.up(stack, log=lambda _m: None)
    yield stack
    if any(report["started"].values()):
        kube.down(stack, log=lambda _m: None)
