#!/bin/bash
# Instructions of one evaluate() of one layout: cachegrind's count of 201 calls less that of 1, over
# 200. Deterministic to about 0.01 M: ASLR off (object ids and dict layouts repeat), one BLAS thread
# (a spinning OpenBLAS thread adds ±0.2 M), a first run that writes the .pyc files.
# Usage: [PYTHON=python] benchmarks/evaluate_instructions.sh [REPO_ROOT]   (valgrind and setarch on the PATH)
cd "${1:-$(dirname "$0")/..}" || exit 1
PYTHON=${PYTHON:-python}
count() {
    OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 PYTHONHASHSEED=0 PYTHONPATH=$PWD \
        setarch "$(uname -m)" -R valgrind --tool=cachegrind --cache-sim=no --cachegrind-out-file=/dev/null \
        "$PYTHON" benchmarks/evaluate_once.py "$1" 2>&1 | grep "I *refs" | awk '{print $NF}' | tr -d ,
}
count 1 >/dev/null
one=$(count 1); many=$(count 201)
"$PYTHON" -c "print('M instructions per evaluate():', round(($many - $one) / 200 / 1e6, 3))"
