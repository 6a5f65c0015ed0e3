"""Resolve a Java classpath from a pom with Maven, cached by the pom's content.

``mvn dependency:build-classpath`` points into the local Maven cache (~/.m2), so nothing
is copied and a second start does not run Maven at all.
"""
from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path
from typing import Callable

from suanli.errors import StackError


def resolve_classpath(pom: Path, cache_dir: Path, log: Callable[[str], None] = print) -> str:
    """Return the classpath of ``pom``'s dependencies, resolving them once.

    Raises :class:`StackError` naming the command and the tail of Maven's output.
    """
    digest = hashlib.sha256(pom.read_bytes()).hexdigest()[:16]
    cache_dir.mkdir(parents=True, exist_ok=True)
    cp_file = cache_dir / f"classpath-{digest}.txt"
    if cp_file.exists():
        classpath = cp_file.read_text().strip()
        if all(Path(p).exists() for p in classpath.split(":")):
            return classpath
    log(f"resolving {pom.parent.name} jars with Maven (first run only)...")
    argv = ["mvn", "-q", "-B", "-f", str(pom), "dependency:build-classpath",
            f"-Dmdep.outputFile={cp_file}"]
    result = subprocess.run(argv, capture_output=True, text=True)
    if result.returncode != 0 or not cp_file.exists():
        tail = "\n".join((result.stdout + result.stderr).splitlines()[-20:])
        raise StackError(f"`{' '.join(argv)}` failed (exit {result.returncode}):\n{tail}")
    return cp_file.read_text().strip()
