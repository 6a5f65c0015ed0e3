"""A local certificate authority made with ``openssl``, for services that serve TLS on loopback
(the Kubernetes API server, the secure Kafka broker).

Keys are EC P-256 (quick to make and to handshake) and unencrypted PKCS#8, readable only by
their owner. Everything is made once and kept: clients that trust the CA keep working across
restarts. Each file is written under a temporary name and renamed, so a crash never leaves a
half-written certificate behind.
"""
from __future__ import annotations

import subprocess
from pathlib import Path

from suanli.errors import StackError

EC = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
DAYS = "3650"


def openssl(*args: str) -> None:
    """Run ``openssl ARGS``; a failure raises StackError with openssl's message."""
    proc = subprocess.run(["openssl", *args], capture_output=True, text=True)
    if proc.returncode != 0:
        raise StackError(f"openssl {args[0]} failed: {proc.stderr.strip()}")


def ensure_ca(directory: Path, common_name: str, name: str = "ca") -> tuple[Path, Path]:
    """``(certificate, key)`` of the CA in ``directory`` (``<name>.crt``, ``<name>.key``), made if absent."""
    directory.mkdir(parents=True, exist_ok=True)
    cert, key = directory / f"{name}.crt", directory / f"{name}.key"
    if not cert.exists():
        tmp = directory / f"{name}.tmp"
        openssl("req", "-x509", *EC, "-keyout", str(key), "-out", str(tmp), "-days", DAYS,
                "-subj", f"/CN={common_name}", "-addext", "basicConstraints=critical,CA:TRUE",
                "-addext", "keyUsage=critical,keyCertSign,cRLSign")
        key.chmod(0o600)
        tmp.rename(cert)
    return cert, key


def ensure_leaf(directory: Path, name: str, common_name: str, ca: tuple[Path, Path], *,
                alt_names: str = "IP:127.0.0.1,DNS:localhost", usages: str = "serverAuth") -> tuple[Path, Path]:
    """``(certificate, key)`` ``<name>.crt``/``<name>.key`` in ``directory``, signed by ``ca``
    for ``alt_names`` with the extended key ``usages`` (e.g. ``"serverAuth,clientAuth"``), made if absent."""
    cert, key = directory / f"{name}.crt", directory / f"{name}.key"
    if not cert.exists():
        ext = directory / f"{name}.ext"
        ext.write_text(f"subjectAltName={alt_names}\nbasicConstraints=critical,CA:FALSE\n"
                       f"keyUsage=critical,digitalSignature\nextendedKeyUsage={usages}\n")
        csr, tmp = directory / f"{name}.csr", directory / f"{name}.tmp"
        openssl("req", *EC, "-keyout", str(key), "-out", str(csr), "-subj", f"/CN={common_name}")
        key.chmod(0o600)
        openssl("x509", "-req", "-in", str(csr), "-CA", str(ca[0]), "-CAkey", str(ca[1]), "-CAcreateserial",
                "-days", DAYS, "-extfile", str(ext), "-out", str(tmp))
        tmp.rename(cert)
    return cert, key
