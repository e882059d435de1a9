#!/usr/bin/env bash
# CPU-side rehearsal of the GPU machine's install, before spending device time: a Python 3.12 venv holding the
# image's packages (image_packages.txt, at the resolved versions), the carried parts checked, joined and
# unpacked exactly as run_on_gpu.sh does (unpack_site.sh), then every module the smoke needs imported (vLLM's
# CUDA extension `vllm._C` cannot load without a GPU and only warns).
#     PY312=/path/to/python3.12 bash benchmarks/verl_smoke/check_install.sh
set -euo pipefail
PY312="${PY312:-$(command -v python3.12)}"
WORK="${WORK:-/tmp/agl-verl-check}"
rm -rf "$WORK" && mkdir -p "$WORK/wheels"
uv venv -q -p "$PY312" "$WORK/image"
grep -v '^#' benchmarks/verl_smoke/image_packages.txt | cut -d= -f1 | sort > "$WORK/image-names"
grep -E '^[A-Za-z0-9]' .whl/resolved.txt | sed 's/ .*//' | while read -r pin; do
    name=$(echo "${pin%%==*}" | tr 'A-Z_.' 'a-z--')
    grep -qx "$name" "$WORK/image-names" && echo "$pin"
done > "$WORK/image-reqs.txt"
uv pip install -q --python "$WORK/image/bin/python" -r "$WORK/image-reqs.txt"
PYTHON="$PY312" bash benchmarks/verl_smoke/unpack_site.sh .whl/parts "$WORK/unpacked"
SRC=$(ls -d "$PWD"/packages/*/src | paste -sd:)
PYTHONPATH="$WORK/unpacked/site:$SRC" "$WORK/image/bin/python" -c "
import vllm, verl, ray, transfer_queue, tensordict, transformers, tokenizers
import vllm.entrypoints.openai.api_server
from verl.workers.rollout.vllm_rollout import vllm_async_server
from verl.trainer.main_ppo import run_ppo
import litellm, agl.proxy, agl.store, agl.runner, agl.algorithms.verl.trainer, agl.algorithms.verl.bridge
print('install check ok: vllm', vllm.__version__, 'verl', verl.__version__, 'transformers', transformers.__version__)
" 2>&1 | grep -v -e 'vllm._C' -e Warning -e warnings.warn
