#!/usr/bin/env bash
# Build the offline GPU bundle (issue 15): everything benchmarks/gpu.py needs on a Linux x86_64
# CUDA host with no network, split into parts of at most 60 MiB with a checksum each.
#
#   deploy/bundle/build.sh OUT_DIR [PYTHON_VERSION]      (make bundle)
#
# OUT_DIR gets streamer-gpu-bundle.tar.part-NNN, SHA256SUMS and unpack.sh. On the host, with the
# parts, SHA256SUMS and unpack.sh in one folder:  bash unpack.sh   (checks every part, reassembles,
# installs into a fresh venv with pip --no-index, and runs the benchmark from memory: no broker).
# The wheels are for CPython PYTHON_VERSION (default: this python3's) on manylinux x86_64; the
# CUDA and cuDNN libraries are the host's (as on the CUDA base image of deploy/docker/Dockerfile.gpu),
# unless BUNDLE_CUDA_WHEELS=1 adds NVIDIA's CUDA and cuDNN wheels (some GiB more).
set -euo pipefail
out=$(realpath -m "${1:?usage: build.sh OUT_DIR [PYTHON_VERSION]}")
pyver=${2:-$(python3 -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')}
root=$(cd "$(dirname "$0")/../.." && pwd)
py=${PY:-$root/.venv/bin/python}
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
bundle=$stage/streamer-gpu-bundle
mkdir -p "$bundle/wheelhouse" "$bundle/models" "$bundle/benchmarks" "$bundle/deploy/config" "$out"

# Every dependency as a binary wheel for the target, onnxruntime-gpu included (pyproject.toml
# pins it). No source distributions: the host may have no compiler. streamer itself travels as
# source with the files it reads beside it (schemas, the example config), as in a checkout.
reqs=$("$py" - "$root/pyproject.toml" <<'EOF'
import sys, tomllib
deps = tomllib.load(open(sys.argv[1], "rb"))["project"]["dependencies"]
# The Linux x86_64 lines only: the host is one.
print("\n".join(d.split(";")[0].strip() for d in deps if "platform_system != 'Linux'" not in d))
EOF
)
if [ "${BUNDLE_CUDA_WHEELS:-0}" = 1 ]; then
  reqs=$(echo "$reqs" | sed 's/^onnxruntime-gpu==/onnxruntime-gpu[cuda,cudnn]==/')
fi
echo "$reqs" > "$bundle/requirements.txt"
platforms=()
for p in manylinux2014_x86_64 manylinux_2_17_x86_64 manylinux_2_27_x86_64 manylinux_2_28_x86_64; do
  platforms+=(--platform "$p")
done
"$py" -m pip download -q --only-binary=:all: "${platforms[@]}" --python-version "$pyver" \
  --implementation cp --dest "$bundle/wheelhouse" -r "$bundle/requirements.txt"

cp -r "$root/streamer" "$bundle/"
find "$bundle/streamer" -name __pycache__ -prune -exec rm -rf {} +
cp "$root/deploy/config/example.yaml" "$bundle/deploy/config/"
cp "$root"/models/*.onnx "$bundle/models/"
cp "$root/benchmarks/gpu.py" "$bundle/benchmarks/"
cp "$root/deploy/bundle/install-and-run.sh" "$bundle/"
echo "$pyver" > "$bundle/PYTHON_VERSION"

# One tar, cut into parts of at most 60 MiB, a checksum per part.
rm -f "$out"/streamer-gpu-bundle.tar.part-* "$out/SHA256SUMS"
tar -C "$stage" -cf - streamer-gpu-bundle | split -b 60M -d -a 3 - "$out/streamer-gpu-bundle.tar.part-"
(cd "$out" && sha256sum streamer-gpu-bundle.tar.part-* > SHA256SUMS)
cp "$root/deploy/bundle/unpack.sh" "$out/"
echo "bundle: $(ls "$out"/streamer-gpu-bundle.tar.part-* | wc -l) parts, $(du -sh "$out" | cut -f1) in $out"
