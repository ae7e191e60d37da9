#!/usr/bin/env bash
# Inside an unpacked bundle: a fresh venv from the wheelhouse alone (pip --no-index: no network),
# then benchmarks/gpu.py from memory (no broker). Arguments go to the benchmark.
set -euo pipefail
bundle=$(cd "$(dirname "$0")" && pwd)
want=$(cat "$bundle/PYTHON_VERSION")
python=${PYTHON:-python$want}
command -v "$python" >/dev/null || python=python3
have=$("$python" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
[ "$have" = "$want" ] || { echo "this bundle's wheels are for Python $want; $python is $have (set PYTHON=...)" >&2; exit 2; }
"$python" -m venv "$bundle/venv"
"$bundle/venv/bin/python" -m pip install -q --no-index --find-links "$bundle/wheelhouse" -r "$bundle/requirements.txt"
cd "$bundle"
exec "$bundle/venv/bin/python" benchmarks/gpu.py --memory-only --model "$bundle/models/fraud_encoder.onnx" "$@"
