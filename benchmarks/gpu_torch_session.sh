#!/usr/bin/env bash
# What issue 45 still has to measure for PyTorch, as ONE device call (15 minutes of device time a session, its
# start included; measured so far: benchmarks/README.md, "On an H100"). Each step has its own time limit and
# writes $OUT/NN_step.txt as it ends, so a step cut short still returns what the steps before it measured.
# On the GPU machine, from the checkout's root:
#   bash .gpu-torch/install.sh && bash benchmarks/gpu_torch_session.sh          (~10 min on an H100: give the call
#   timeout_s 560 and the steps left over wait for the next session)
# Here, to find the script's faults before a GPU session pays for them (figures say nothing about GPUs):
#   OUT=/tmp/session PYTHON=.venv/bin/python bash benchmarks/gpu_torch_session.sh --rehearse
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/gpu_torch_session}; mkdir -p "$out"
py=${PYTHON:-python3}
rehearse=false; [[ ${1:-} == --rehearse ]] && rehearse=true

source benchmarks/_session.sh

ray_exec_bits "$py"
machine_note

if $rehearse; then
  ab=(--device cpu --model resnet8_cifar --image-size 32 --batch-per-gpu 16 --blocks 4 --steps 6)
  yard=(--rehearse --warmup-steps 3 --steps 10); big=16; defaults=(--rehearse --warmup-steps 3 --steps 10 --batch 16)
  gen=(--classes 4 --per-class 12 --val-per-class 4); scale=(--scale smoke --emulate-gpus 1)
else
  ab=(--device cuda --model resnet50_v1 --image-size 224 --batch-per-gpu 256 --blocks 6 --steps 12)
  yard=(--steps 60); big=256; defaults=(--warmup-steps 5 --steps 12)
  gen=(--classes 10 --per-class 300 --val-per-class 60); scale=(--scale full)
fi
# Ordered by what is still missing (benchmarks/README.md, "On an H100"): a step the call's limit cuts is the last.
# 1. TF32 against fp32 (the default precision), in the plain program; fewer steps, as fp32 is slow and its side ran
#    out of time twice on 2026-11-27.
step 01_defaults_tf32 150 "$py" benchmarks/gpu_torch_defaults.py "${defaults[@]}" --pairs tf32
# 2. The compiled bf16 gap (0.947x on 2026-11-26): both steps in one process, so the step is told from the process.
step 02_step_ab_bf16_compiled 200 "$py" -m torch.distributed.run --standalone --nproc_per_node 1 benchmarks/torch_step_ab.py \
  "${ab[@]}" --precision bf16 --compile --threads 8
# 3. The compiled cell not measured yet: fp16 at the large batch.
step 03_compiled_fp16 200 "$py" benchmarks/gpu_torch_yardsticks.py "${yard[@]}" --compile on --precisions fp16 --batches $big --work /tmp/gts3
# 4. Real data against synthetic again (benchmarks/gpu_real_data.yaml; measured 2026-11-27): a generated ImageNet-like
#    set made here, decoded by 4, 8 and 15 CPU workers and by nvJPEG, through the engine; then the report's tables
#    (the report's Markdown comes back; the run's Parquet is too big to).
data=/tmp/gts-data; results=/tmp/gts-results
step 04_real_data 330 bash -c "$py -m sweep data make imagenet-like ${gen[*]} --data-dir $data && \
  $py -m sweep run benchmarks/gpu_real_data.yaml ${scale[*]} --data-dir $data --results $results; \
  $py -m sweep report gpu_real_data --results $results"
cp "$results"/gpu_real_data/*/report/report.md "$out/04_real_data_report.md" 2>/dev/null
