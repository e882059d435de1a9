#!/usr/bin/env bash
# The VERL GPU smoke, on the lent H200 (no network): install the carried wheels, then train the calc agent
# with `train_calc_x.py --algorithm verl` on the embedded model for a few steps and print the figures.
# Run from the repository root, after the parts of .whl/parts/ were carried (see README.md):
#     bash benchmarks/verl_smoke/run_on_gpu.sh [STEPS]        # results under $OUT (or ./smoke-out)
set -euo pipefail
STEPS="${1:-3}"
OUT="${OUT:-$PWD/smoke-out}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 LITELLM_LOCAL_MODEL_COST_MAP=True TOKENIZERS_PARALLELISM=false VLLM_LOGGING_LEVEL=WARN
PY="${PYTHON:-python3}"

t0=$(date +%s)
# 1. the wheels: check the parts, join, unpack, install next to the image's packages
(cd .whl/parts && sha256sum -c --quiet <(grep ' part' SHA256SUMS))
cat .whl/parts/part* > /tmp/agl-wheels.tar
(cd .whl/parts && echo "$(grep ' wheels.tar' SHA256SUMS | cut -d' ' -f1)  /tmp/agl-wheels.tar" | sha256sum -c --quiet)
rm -rf /tmp/agl-wheels && mkdir -p /tmp/agl-wheels && tar xf /tmp/agl-wheels.tar -C /tmp/agl-wheels
"$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    /tmp/agl-wheels/wheels/*.whl
SRC=$(ls -d "$PWD"/packages/*/src | paste -sd:)
export PYTHONPATH="/tmp/site:$SRC${PYTHONPATH:+:$PYTHONPATH}"
"$PY" -c "import vllm, verl, ray, transfer_queue, tensordict, transformers, agl.algorithms.verl.trainer; \
print('imports ok: vllm', vllm.__version__, 'verl', verl.__version__, 'transformers', transformers.__version__)"
echo "install_s=$(( $(date +%s) - t0 ))" | tee "$OUT/install.txt"

# 2. the run, watched
exec "$PY" benchmarks/verl_smoke/smoke.py --steps "$STEPS" --out "$OUT"
