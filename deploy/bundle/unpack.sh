#!/usr/bin/env bash
# On the GPU host, in the folder holding the parts, SHA256SUMS and this script:
#   bash unpack.sh [DIR] [-- BENCHMARK ARGS]
# checks every part against SHA256SUMS, reassembles and unpacks the bundle into DIR (default
# ./streamer-gpu), then installs it into a fresh venv there and runs the benchmark (no network).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dest=$(realpath -m "${1:-./streamer-gpu}")
[ $# -gt 0 ] && shift
[ "${1:-}" = "--" ] && shift
(cd "$here" && sha256sum --check --quiet SHA256SUMS)
echo "all $(wc -l < "$here/SHA256SUMS") parts check out"
mkdir -p "$dest"
cat "$here"/streamer-gpu-bundle.tar.part-* | tar -C "$dest" -xf -
exec bash "$dest/streamer-gpu-bundle/install-and-run.sh" "$@"
