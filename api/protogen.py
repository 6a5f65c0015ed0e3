"""Generate the Python gRPC stubs of ``schemas/proto/suanli.proto`` into ``api/``.

    python -m suanli.api.protogen            # rewrite api/suanli_pb2*.py(i)
    python -m suanli.api.protogen --check    # exit 1 if the committed stubs are stale

The stubs are committed (``api/suanli_pb2.py``, ``suanli_pb2_grpc.py``, ``suanli_pb2.pyi``)
so that running the API needs only ``grpcio`` and ``protobuf``, not the compiler
(``grpcio-tools`` is a development dependency). ``tests/api/test_contract.py`` regenerates
them and fails when they differ from the committed ones, so they cannot drift from the
proto. The compiler is the one bundled with ``grpcio-tools`` (no system ``protoc``).
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

from suanli.errors import SchemaError

API_DIR = Path(__file__).resolve().parent
PROTO_DIR = API_DIR.parent / "schemas" / "proto"
PROTO = PROTO_DIR / "suanli.proto"
OUTPUTS = ("suanli_pb2.py", "suanli_pb2_grpc.py", "suanli_pb2.pyi")


def generate(out_dir: Path) -> list[Path]:
    """Compile the proto into ``out_dir``; returns the written files.

    The compiler runs in a child process: ``grpc_tools`` links its own C++ protobuf, which
    must never be loaded next to ortools' (the process aborts).
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    done = subprocess.run([sys.executable, "-m", "grpc_tools.protoc", f"-I{PROTO_DIR}", f"--python_out={out_dir}",
                           f"--pyi_out={out_dir}", f"--grpc_python_out={out_dir}", str(PROTO)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise SchemaError(f"protoc failed on {PROTO} (exit {done.returncode}): {done.stderr.strip()}")
    grpc_file = out_dir / "suanli_pb2_grpc.py"
    text = grpc_file.read_text()
    # protoc writes a top-level import; the stubs live in the suanli.api package.
    grpc_file.write_text(text.replace("import suanli_pb2 as suanli__pb2",
                                      "from suanli.api import suanli_pb2 as suanli__pb2"))
    return [out_dir / name for name in OUTPUTS]


def stale(target: Path = API_DIR) -> list[str]:
    """Names of the committed stubs that differ from a fresh compile of the proto."""
    with tempfile.TemporaryDirectory() as tmp:
        fresh = generate(Path(tmp))
        return [p.name for p in fresh
                if not (target / p.name).exists() or (target / p.name).read_bytes() != p.read_bytes()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only check that the committed stubs are current")
    args = parser.parse_args(argv)
    if args.check:
        names = stale()
        if names:
            print(f"stale gRPC stubs: {', '.join(names)}; run python -m suanli.api.protogen", file=sys.stderr)
            return 1
        return 0
    for path in generate(API_DIR):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
