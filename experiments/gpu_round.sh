#!/usr/bin/env bash
# One short round of the GPU checks on a lent CUDA machine (the device tool): the wheels this checkout needs
# beside the machine's own torch (carried in .whl/, see docs/accuracy.md "On a GPU"), then
#   gpu_kernels.py   the step-time model's device parameters against this GPU (GEMM, SDPA kernels, HBM, norm)
#   gpu_sac.py       what torchtitan's per-op SAC keeps per layer against estimate/engine_memory.py
#   gpu_layers.py    Llama 3 8B layers' forward+backward against the step-time model (FA2, eager, per-op SAC)
#   gpu_check.py     NVML detection, calibrate --quick, real one-GPU launches held against the prediction
# Every output goes to $OUT (or ./gpu-out). Usage: bash experiments/gpu_round.sh [gpu_check.py options]
set -u
out=${OUT:-gpu-out}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 DS_BUILD_OPS=0
if ls .whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 3
    export PYTHONPATH=/tmp/site
fi
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH}
python3 -c "import torch, transformers, deepspeed, datasets, pyarrow, textual; print('torch', torch.__version__, 'transformers', transformers.__version__, 'deepspeed', deepspeed.__version__, 'datasets', datasets.__version__, 'pyarrow', pyarrow.__version__)" 2>&1 | tail -3
nvidia-smi --query-gpu=name,memory.total,driver_version,power.limit,clocks.max.sm --format=csv
timeout 150 python3 experiments/gpu_kernels.py --json "$out/kernels.json" 2>&1 | tee "$out/kernels.log"
timeout 120 python3 experiments/gpu_sac.py 2>&1 | tee "$out/sac.log"
timeout 150 python3 experiments/gpu_layers.py 2>&1 | tee "$out/layers.log"
timeout 60 python3 -m paradvisor recommend --model llama-2-7b --json >"$out/recommend.json" 2>"$out/recommend.err"
echo "recommend on this machine: rc $? $(head -c 300 "$out/recommend.err")"
timeout ${CHECK_TIMEOUT:-300} python3 experiments/gpu_check.py --json "$out/check.json" "$@" 2>&1 | tee "$out/check.log"
