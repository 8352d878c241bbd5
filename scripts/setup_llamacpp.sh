#!/usr/bin/env bash
# llama.cpp beside the project, for comparing engines on the same GGUF file: its Python binding
# (llama-cpp-python), built from source for this CPU, in a venv of its own. The project never imports it:
# bench.py --target smollm2 --suite --peer llamacpp runs benchmarks/llamacpp_peer.py with that venv's Python.
#
#   bash scripts/setup_llamacpp.sh          # about 13 minutes on 2 cores; then prints the build and the CPU features
#   bash scripts/setup_llamacpp.sh --server # also llama.cpp's own C++ server, from the same source (--peer llama-server)
#   LLAMACPP_VENV=/elsewhere bash scripts/setup_llamacpp.sh
#
# Offline but for the package index (pip fetches the source and its build tools). Native build (-DGGML_NATIVE=ON);
# on a CPU with AMX, ggml's AMX matrix kernel stopped with SIGILL at the first decode of this binding's build, so
# there the compiler is told not to emit AMX instructions (-mno-amx-int8).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${LLAMACPP_VENV:-.peers/llamacpp}
VERSION=0.3.36
SERVER=0
case "${1:-}" in
    --server) SERVER=1;;
    "") ;;
    *) echo "setup_llamacpp: unknown argument '$1'; the only one is --server (also build llama-server)" >&2; exit 2;;
esac

for tool in cc c++ cmake; do
    command -v "$tool" > /dev/null || { echo "setup_llamacpp: no $tool on PATH; llama.cpp builds from source: install a C and C++ compiler and cmake" >&2; exit 2; }
done
PYTHON=${PYTHON:-python3}
"$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 9))' || { echo "setup_llamacpp: $PYTHON is older than 3.9, which llama-cpp-python $VERSION needs" >&2; exit 2; }

FLAGS="-DGGML_NATIVE=ON -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF"
if grep -qw amx_int8 /proc/cpuinfo 2> /dev/null; then
    FLAGS="$FLAGS -DCMAKE_C_FLAGS=-mno-amx-int8 -DCMAKE_CXX_FLAGS=-mno-amx-int8"
fi
if "$VENV/bin/python" -c "import llama_cpp, sys; sys.exit(llama_cpp.__version__ != '$VERSION')" 2> /dev/null; then
    echo "setup_llamacpp: llama-cpp-python==$VERSION already in $VENV"
else
    echo "setup_llamacpp: llama-cpp-python==$VERSION into $VENV, CMAKE_ARGS=\"$FLAGS\" (about 13 minutes on 2 cores)"
    "$PYTHON" -m venv "$VENV"
    "$VENV/bin/pip" install --quiet --upgrade pip
    CMAKE_ARGS="$FLAGS" "$VENV/bin/pip" install --quiet --no-cache-dir "llama-cpp-python==$VERSION"
    "$VENV/bin/python" -c 'import llama_cpp; print(f"llama-cpp-python {llama_cpp.__version__}; ggml: {llama_cpp.llama_print_system_info().decode().strip()}")'
fi
echo "setup_llamacpp: done; python bench.py --target smollm2 --suite --peer llamacpp runs it (or LLAMACPP_PYTHON=$VENV/bin/python)"
[ "$SERVER" = 1 ] || exit 0

# llama-server from the llama.cpp inside the same release's source archive: the binding's engine, its C++ lookups
# (--spec-type) and HTTP server, linked statically, no web UI, no HTTPS (it serves this machine only).
SRC=$(mktemp -d)
trap 'rm -rf "$SRC"' EXIT
echo "setup_llamacpp: llama-server from llama-cpp-python $VERSION's source (about 10 minutes on 2 cores)"
"$VENV/bin/pip" download --quiet --no-deps --no-binary :all: "llama-cpp-python==$VERSION" -d "$SRC"
tar xzf "$SRC/llama_cpp_python-$VERSION.tar.gz" -C "$SRC"
LLAMA="$SRC/llama_cpp_python-$VERSION/vendor/llama.cpp"
cmake -S "$LLAMA" -B "$SRC/build" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_SERVER=ON \
    -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_UI=OFF -DLLAMA_OPENSSL=OFF ${FLAGS//-DLLAMA_BUILD_SERVER=OFF/} > "$SRC/cmake.log" \
    || { tail -20 "$SRC/cmake.log" >&2; exit 1; }
cmake --build "$SRC/build" --target llama-server -j "$(nproc)" > "$SRC/build.log" || { tail -20 "$SRC/build.log" >&2; exit 1; }
cp "$SRC/build/bin/llama-server" "$VENV/bin/llama-server"
"$VENV/bin/llama-server" --version
echo "setup_llamacpp: llama-server in $VENV/bin; python bench.py --target smollm2 --suite --peer llama-server runs it"
