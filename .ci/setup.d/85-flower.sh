#!/usr/bin/env bash
# The Flower runtime of federated training (issue 22; connectors/flower/, tests/connectors/flower):
# its own venv, <home>/flower/venv (default .suanli/flower/venv), because flwr 1.42 pins
# fastapi/starlette/uvicorn/rich/packaging below what the project needs. deploy/flower.py
# holds the pinned requirements and a stamp of them: on a warm machine this only compares
# the stamp; pip runs only when the pins (or the Python version) change. Only PyPI is used.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

t0=$SECONDS
python=$(.venv/bin/python -m suanli.deploy.flower setup)
echo "   flower: $("$python" -c 'import flwr, sklearn; print("flwr", flwr.__version__, "scikit-learn", sklearn.__version__)') in $(( SECONDS - t0 ))s ($python)"
