"""A Kubernetes control plane on loopback for the Kubernetes adapter: etcd, kube-apiserver, kwok.

The binaries: ``etcd`` from Debian (``etcd-server``), ``kube-apiserver``, ``kubectl`` and
``kwok`` built by ``.ci/setup.d/80-kubernetes.sh`` from the Go module proxy into a cache keyed
by version (``$SUANLI_K8S_CACHE``, default ``~/.cache/suanli/k8s``; the versions are in
``deploy/k8s-build/versions.env``). Each runs as a pid-file service of the project's own
(``deploy/processes.py``); no system service is involved, nothing binds other than 127.0.0.1.

* **etcd** on ``127.0.0.1:12379`` (peer ``:12380``; ``SUANLI_K8S_ETCD_PORT``), data in
  ``<home>/k8s/etcd`` (``SUANLI_K8S_ETCD_DIR`` moves it, e.g. to a tmpfs).
* **kube-apiserver** on ``https://127.0.0.1:16443`` (``SUANLI_K8S_APISERVER_PORT``): a
  serving certificate for 127.0.0.1/localhost signed by a CA that ``up`` makes with
  ``openssl`` (``<home>/k8s/pki``), a service-account key pair (same place) and issuer, a
  token file with one admin token (group ``system:masters``), RBAC authorization. The
  ``ServiceAccount`` admission plug-in is off: no controller-manager runs here to create the
  namespaces' ``default`` accounts, so pods could not be created otherwise.
* **kwok** manages the nodes annotated ``kwok.x-k8s.io/node=fake`` (and their pods) with the
  stages of ``deploy/kwok/stages.yaml``: such nodes become Ready, pods bound to them Running, and
  a pod annotated ``suanli.io/run-duration`` (a Go duration: ``30s``) Succeeded that long after.
  Health on ``127.0.0.1:10247`` (``SUANLI_K8S_KWOK_PORT``).

``up`` is idempotent (a running service is found by its pid file and left alone; the
certificates and keys are made once) and waits on conditions: etcd's ``/health``,
the API server's ``/readyz`` and kwok's ``/healthz`` answering. ``<home>/k8s/kubeconfig`` is
the admin kubeconfig for kubectl and the adapter. ``down`` stops what runs, by pid, in reverse.
"""
from __future__ import annotations

import os
import secrets
import ssl
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import httpx

from suanli.config import Settings
from suanli.deploy.processes import ServiceProcess
from suanli.deploy.pki import ensure_ca, ensure_leaf, openssl
from suanli.errors import StackError

HOST = "127.0.0.1"
HERE = Path(__file__).resolve().parent
VERSIONS = HERE / "k8s-build" / "versions.env"
STAGES = HERE / "kwok" / "stages.yaml"
KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"          # value "fake": a node kwok manages
SERVICES = ("etcd", "kube-apiserver", "kwok")        # start order; stopped in reverse


def versions() -> dict[str, str]:
    """``KUBERNETES_VERSION`` and ``KWOK_VERSION`` from ``deploy/k8s-build/versions.env``."""
    out = {}
    for line in VERSIONS.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            key, _, value = line.partition("=")
            out[key.strip()] = value.strip()
    return out


def cache_dir() -> Path:
    return Path(os.environ.get("SUANLI_K8S_CACHE") or Path.home() / ".cache" / "suanli" / "k8s")


def binaries() -> dict[str, Path]:
    """Paths of etcd, kube-apiserver, kubectl and kwok; StackError naming the setup step when one is missing."""
    v = versions()
    k8s = cache_dir() / v["KUBERNETES_VERSION"] / "bin"
    found = {"etcd": Path("/usr/bin/etcd"), "kube-apiserver": k8s / "kube-apiserver", "kubectl": k8s / "kubectl",
             "kwok": cache_dir() / f"kwok-{v['KWOK_VERSION']}" / "bin" / "kwok"}
    missing = [name for name, path in found.items() if not os.access(path, os.X_OK)]
    if missing:
        raise StackError(f"Kubernetes binaries missing: {', '.join(str(found[m]) for m in missing)}; "
                         "run .ci/setup.d/80-kubernetes.sh (etcd from Debian, the rest built from the Go module proxy)")
    return found


def _port(var: str, default: int) -> int:
    return int(os.environ.get(var) or default)


@dataclass(frozen=True)
class K8sPaths:
    """Where one Kubernetes control plane keeps its state, and its ports."""

    home: Path
    etcd_port: int = 12379
    apiserver_port: int = 16443
    kwok_port: int = 10247

    @classmethod
    def of(cls, settings: Settings) -> K8sPaths:
        return cls(settings.home, _port("SUANLI_K8S_ETCD_PORT", 12379), _port("SUANLI_K8S_APISERVER_PORT", 16443),
                   _port("SUANLI_K8S_KWOK_PORT", 10247))

    @property
    def root(self) -> Path:
        return self.home / "k8s"

    @property
    def pki(self) -> Path:
        return self.root / "pki"

    @property
    def etcd_data(self) -> Path:
        return Path(os.environ["SUANLI_K8S_ETCD_DIR"]) if os.environ.get("SUANLI_K8S_ETCD_DIR") else self.root / "etcd"

    @property
    def kubeconfig(self) -> Path:
        return self.root / "kubeconfig"

    @property
    def token_file(self) -> Path:
        return self.pki / "tokens.csv"

    @property
    def ca(self) -> Path:
        return self.pki / "ca.crt"

    @property
    def server(self) -> str:
        return f"https://{HOST}:{self.apiserver_port}"

    def service(self, name: str) -> ServiceProcess:
        # the marker is a path only this service's command line holds (its data dir, certificate, config)
        marker = {"etcd": str(self.etcd_data), "kube-apiserver": str(self.token_file),
                  "kwok": str(self.root / "kwok.kubeconfig")}[name]
        return ServiceProcess(name, self.home / "run" / f"k8s-{name}.pid", self.home / "logs" / f"k8s-{name}.log",
                              marker)


@dataclass(frozen=True)
class KubeAccess:
    """What a client needs: the server URL, the admin bearer token, the CA bundle, the kubeconfig."""

    server: str
    token: str
    ca_file: Path
    kubeconfig: Path


def access(settings: Settings) -> KubeAccess:
    """The running (or last started) control plane's address and credentials."""
    paths = K8sPaths.of(settings)
    return KubeAccess(paths.server, _admin_token(paths), paths.ca, paths.kubeconfig)


def _admin_token(paths: K8sPaths) -> str:
    return paths.token_file.read_text().split(",", 1)[0]


def _ensure_pki(paths: K8sPaths) -> None:
    """A CA, a serving certificate for 127.0.0.1 and localhost, a service-account key pair and
    the admin token: made once, kept across restarts so kubeconfigs and issued tokens stay valid."""
    pki = paths.pki
    ca = ensure_ca(pki, "suanli-kubernetes-ca")
    ensure_leaf(pki, "apiserver", "kube-apiserver", ca,
                alt_names="IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default")
    if not (pki / "sa.pub").exists():
        openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-out", str(pki / "sa.key"))
        openssl("pkey", "-in", str(pki / "sa.key"), "-pubout", "-out", str(pki / "sa.tmp"))
        (pki / "sa.tmp").rename(pki / "sa.pub")
    if not paths.token_file.exists():
        tmp = paths.token_file.with_suffix(".tmp")
        tmp.write_text(f'{secrets.token_hex(24)},suanli-admin,suanli-admin,"system:masters"\n')
        tmp.chmod(0o600)
        tmp.rename(paths.token_file)


def kubeconfig_text(server: str, ca_file: Path, token: str, user: str = "suanli-admin") -> str:
    """A kubeconfig (YAML) with one cluster, one token user and one current context."""
    return (f"apiVersion: v1\nkind: Config\nclusters:\n- name: suanli\n  cluster:\n    server: {server}\n"
            f"    certificate-authority: {ca_file}\nusers:\n- name: {user}\n  user:\n    token: {token}\n"
            f"contexts:\n- name: suanli\n  context:\n    cluster: suanli\n    user: {user}\n"
            f"current-context: suanli\n")


def _write_kubeconfigs(paths: K8sPaths) -> None:
    text = kubeconfig_text(paths.server, paths.ca, _admin_token(paths))
    for target in (paths.kubeconfig, paths.root / "kwok.kubeconfig"):
        tmp = target.with_suffix(".tmp")
        tmp.write_text(text)
        tmp.chmod(0o600)
        tmp.rename(target)


def _argv(name: str, paths: K8sPaths, bins: dict[str, Path]) -> list[str]:
    if name == "etcd":
        client, peer = f"http://{HOST}:{paths.etcd_port}", f"http://{HOST}:{paths.etcd_port + 1}"
        return [str(bins["etcd"]), "--name", "suanli", "--data-dir", str(paths.etcd_data),
                "--listen-client-urls", client, "--advertise-client-urls", client,
                "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                "--initial-cluster", f"suanli={peer}", "--listen-metrics-urls", "",
                "--quota-backend-bytes", str(4 * 1024 ** 3), "--log-level", "warn"]
    if name == "kube-apiserver":
        pki = paths.pki
        return [str(bins["kube-apiserver"]), "--bind-address", HOST, "--advertise-address", HOST,
                "--secure-port", str(paths.apiserver_port),
                "--etcd-servers", f"http://{HOST}:{paths.etcd_port}",
                "--tls-cert-file", str(pki / "apiserver.crt"), "--tls-private-key-file", str(pki / "apiserver.key"),
                "--token-auth-file", str(paths.token_file), "--authorization-mode", "RBAC",
                "--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
                "--service-account-key-file", str(pki / "sa.pub"),
                "--service-account-signing-key-file", str(pki / "sa.key"),
                "--service-cluster-ip-range", "10.96.0.0/16",
                "--disable-admission-plugins", "ServiceAccount",
                # no endpoints for the kubernetes Service: its address would be loopback, which the
                # reconciler refuses, and nothing in this cluster calls the API through the Service
                "--endpoint-reconciler-type", "none",
                "--profiling=false", "--v", "1"]
    if name == "kwok":
        return [str(bins["kwok"]), "--kubeconfig", str(paths.root / "kwok.kubeconfig"), "--config", str(STAGES),
                "--manage-all-nodes=false",
                "--manage-nodes-with-annotation-selector", f"{KWOK_NODE_ANNOTATION}=fake",
                "--server-address", f"{HOST}:{paths.kwok_port}", "--node-ip", "10.255.0.1",
                "--cidr", "10.0.0.1/16"]
    raise StackError(f"unknown Kubernetes service {name!r}")


def _probe(name: str, paths: K8sPaths, token: str) -> bool:
    """Whether ``name`` answers its readiness endpoint."""
    try:
        if name == "etcd":
            r = httpx.get(f"http://{HOST}:{paths.etcd_port}/health", timeout=2)
            return r.status_code == 200 and r.json().get("health") == "true"
        if name == "kube-apiserver":
            r = httpx.get(f"{paths.server}/readyz", headers={"Authorization": f"Bearer {token}"},
                          verify=ssl.create_default_context(cafile=str(paths.ca)), timeout=2)
            return r.status_code == 200
        r = httpx.get(f"http://{HOST}:{paths.kwok_port}/healthz", timeout=2)
        return r.status_code == 200
    except (httpx.HTTPError, ValueError):
        return False


def _wait_ready(name: str, service: ServiceProcess, paths: K8sPaths, token: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not _probe(name, paths, token):
        if service.pid() is None:
            raise StackError(f"{name} exited while starting; last lines of {service.log_file}:\n{service.log_tail()}")
        if time.monotonic() > deadline:
            raise StackError(f"{name} not ready after {timeout:.0f} s; last lines of {service.log_file}:\n"
                             f"{service.log_tail()}")
        time.sleep(0.1)     # a poll interval, not a guess: the loop ends on the condition


def up(settings: Settings, log: Callable[[str], None] = print, timeout: float = 120.0) -> dict[str, Any]:
    """Start (or find running) etcd, kube-apiserver and kwok; wait until each answers.

    Returns ``{"started": {name: bool}, "server", "kubeconfig", "token", "ca_file", "seconds"}``.
    """
    began = time.monotonic()
    bins = binaries()
    paths = K8sPaths.of(settings)
    paths.root.mkdir(parents=True, exist_ok=True)
    _ensure_pki(paths)
    _write_kubeconfigs(paths)
    token = _admin_token(paths)
    started = {}
    for name in SERVICES:
        service = paths.service(name)
        started[name] = service.pid() is None
        if started[name]:
            if name == "etcd":
                paths.etcd_data.mkdir(parents=True, exist_ok=True)
            service.start(_argv(name, paths, bins), cwd=paths.root)
            log(f"k8s: started {name} (pid {service.pid()}, log {service.log_file})")
        _wait_ready(name, service, paths, token, timeout)
    return {"started": started, "server": paths.server, "kubeconfig": str(paths.kubeconfig), "token": token,
            "ca_file": str(paths.ca), "seconds": round(time.monotonic() - began, 2)}


def down(settings: Settings, log: Callable[[str], None] = print) -> dict[str, bool]:
    """Stop kwok, kube-apiserver and etcd (by pid, SIGTERM then SIGKILL); ``{name: was running}``."""
    paths = K8sPaths.of(settings)
    stopped = {}
    for name in reversed(SERVICES):
        stopped[name] = paths.service(name).stop()
        if stopped[name]:
            log(f"k8s: stopped {name}")
    return stopped


def status(settings: Settings) -> list[dict[str, Any]]:
    """One row per service: ``{"service", "pid", "ready"}``."""
    paths = K8sPaths.of(settings)
    token = _admin_token(paths) if paths.token_file.exists() else ""
    return [{"service": name, "pid": paths.service(name).pid(), "ready": _probe(name, paths, token)}
            for name in SERVICES]


def kubectl(settings: Settings, *args: str, input: str | None = None, timeout: float = 120.0
            ) -> subprocess.CompletedProcess[str]:
    """Run the cached kubectl against this control plane (its kubeconfig); the completed process."""
    return subprocess.run([str(binaries()["kubectl"]), "--kubeconfig", str(K8sPaths.of(settings).kubeconfig), *args],
                          input=input, capture_output=True, text=True, timeout=timeout)


def main(argv: list[str] | None = None) -> int:
    """``python -m suanli.deploy.kubernetes up|down|status``: the loopback control plane."""
    import argparse
    import json
    import sys

    from suanli.config import load_settings

    parser = argparse.ArgumentParser(prog="python -m suanli.deploy.kubernetes",
                                     description="etcd, kube-apiserver and kwok on 127.0.0.1 (the binaries: "
                                                 ".ci/setup.d/80-kubernetes.sh).")
    sub = parser.add_subparsers(dest="action", required=True)
    sub.add_parser("up", help="start (or find running) and wait until each answers; prints the kubeconfig")
    sub.add_parser("down", help="stop kwok, kube-apiserver and etcd")
    sub.add_parser("status", help="one JSON line per service: pid and readiness")
    args = parser.parse_args(argv)
    settings = load_settings()
    try:
        if args.action == "up":
            info = up(settings)
            print(f"k8s: ready in {info['seconds']} s; server {info['server']}, kubeconfig {info['kubeconfig']}")
        elif args.action == "down":
            down(settings)
        else:
            for row in status(settings):
                print(json.dumps(row))
    except StackError as exc:
        print(f"k8s: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main())
