#!/usr/bin/env bash
# llama.cpp beside the project, for comparing engines on the same GGUF file: its Python binding
# (llama-cpp-python), built from source for this CPU, in a venv of its own. The project never imports it:
# bench.py --target smollm2 --suite --peer llamacpp runs benchmarks/llamacpp_peer.py with that venv's Python.
#
#   bash scripts/setup_llamacpp.sh          # about 13 minutes on 2 cores; then prints the build and the CPU features
#   LLAMACPP_VENV=/elsewhere bash scripts/setup_llamacpp.sh
#
# Offline but for the package index (pip fetches the source and its build tools). Native build (-DGGML_NATIVE=ON);
# on a CPU with AMX, ggml's AMX matrix kernel stopped with SIGILL at the first decode of this binding's build, so
# there the compiler is told not to emit AMX instructions (-mno-amx-int8).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${LLAMACPP_VENV:-.peers/llamacpp}
VERSION=0.3.36

for tool in cc c++ cmake; do
    command -v "$tool" > /dev/null || { echo "setup_llamacpp: no $tool on PATH; llama.cpp builds from source: install a C and C++ compiler and cmake" >&2; exit 2; }
done
PYTHON=${PYTHON:-python3}
"$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 9))' || { echo "setup_llamacpp: $PYTHON is older than 3.9, which llama-cpp-python $VERSION needs" >&2; exit 2; }

FLAGS="-DGGML_NATIVE=ON -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF"
if grep -qw amx_int8 /proc/cpuinfo 2> /dev/null; then
    FLAGS="$FLAGS -DCMAKE_C_FLAGS=-mno-amx-int8 -DCMAKE_CXX_FLAGS=-mno-amx-int8"
fi
echo "setup_llamacpp: llama-cpp-python==$VERSION into $VENV, CMAKE_ARGS=\"$FLAGS\" (about 13 minutes on 2 cores)"
"$PYTHON" -m venv "$VENV"
"$VENV/bin/pip" install --quiet --upgrade pip
CMAKE_ARGS="$FLAGS" "$VENV/bin/pip" install --quiet --no-cache-dir "llama-cpp-python==$VERSION"
"$VENV/bin/python" - << 'EOF'
import llama_cpp
print(f"llama-cpp-python {llama_cpp.__version__}; ggml: {llama_cpp.llama_print_system_info().decode().strip()}")
EOF
echo "setup_llamacpp: done; python bench.py --target smollm2 --suite --peer llamacpp runs it (or LLAMACPP_PYTHON=$VENV/bin/python)"
