#!/usr/bin/env bash
# The VERL GPU smoke, on the lent H200 (no network): unpack the carried site (the wheels' installed files, xz),
# then train the calc agent with `train_calc_x.py --algorithm verl` on the embedded model for a few steps and
# print the figures. If the first run fails inside vLLM's sleep/wake, it reruns at once with vLLM's KV cache kept
# (free_cache_engine=false). Run from the repository root, after the parts of .whl/parts/ were carried:
#     bash benchmarks/verl_smoke/run_on_gpu.sh [STEPS]        # results under $OUT (or ./smoke-out)
set -euo pipefail
STEPS="${1:-2}"
OUT="${OUT:-$PWD/smoke-out}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 LITELLM_LOCAL_MODEL_COST_MAP=True TOKENIZERS_PARALLELISM=false VLLM_LOGGING_LEVEL=WARN
PY="${PYTHON:-python3}"
SITE="${SITE:-/tmp/agl-site}"

t0=$(date +%s)
bash benchmarks/verl_smoke/unpack_site.sh .whl/parts "$SITE"
SRC=$(ls -d "$PWD"/packages/*/src | paste -sd:)
export PYTHONPATH="$SITE/site:$SRC${PYTHONPATH:+:$PYTHONPATH}"
"$PY" -c "import vllm, verl, ray, transfer_queue, tensordict, transformers, agl.algorithms.verl.trainer; \
print('imports ok: vllm', vllm.__version__, 'verl', verl.__version__, 'transformers', transformers.__version__)"
echo "install_s=$(( $(date +%s) - t0 ))" | tee "$OUT/install.txt"

# the run, watched; once more with the KV cache kept if vLLM's sleep/wake broke the first
if "$PY" benchmarks/verl_smoke/smoke.py --steps "$STEPS" --out "$OUT"; then
    exit 0
fi
if grep -q -i -E 'sleep|wake_up|cumem' "$OUT/train.log"; then
    echo "the first run failed in vLLM's sleep/wake: rerunning with free_cache_engine=false"
    mv "$OUT/train.log" "$OUT/train-first.log"
    rm -rf "$OUT/run" "$OUT/probe.jsonl"
    exec "$PY" benchmarks/verl_smoke/smoke.py --steps "$STEPS" --out "$OUT" --keep-cache-engine
fi
exit 1
