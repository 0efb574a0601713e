#!/usr/bin/env bash
# Issue 43's GPU yardsticks as ONE device call: ResNet-50 (resnet50_v1, 224 px) in bf16 at batch 256 on one GPU,
# Keras 3 on its JAX and its torch backend, the engine's trial against the plain programs:
#   JAX backend:   benchmarks/jax_peer.py (plain JAX) and benchmarks/keras_peer.py --backend jax, then the engine
#   torch backend: benchmarks/keras_peer.py --backend torch and benchmarks/torch_ddp_peer.py (plain PyTorch), then the engine
# Each step has its own time limit and writes $OUT/NN_step.txt as it ends, so a step cut short still returns what
# the steps before it measured. The GPU machine's python3 has JAX (CUDA) and torch but no Keras: Keras travels as
# wheels in .gpu-keras/ (keras and the dependencies the image may lack; installed offline, step 01), Ray and the
# engine's other dependencies in .gpu-torch/ (benchmarks/README.md), needed by the engine's steps only.
# On the GPU machine, from the checkout's root:
#   bash benchmarks/gpu_keras_session.sh        (give the call timeout_s 560; the engine's steps run only where
#                                                trainables/keras/ exists)
# Here, to find the script's faults before a GPU session pays for them (figures say nothing about GPUs), a tiny
# model on the CPU; PYTHON has JAX and Keras (the environment `env create keras` made), TORCH_PYTHON torch and Keras:
#   OUT=/tmp/ks PYTHON=$(ls -d ~/.local/share/sweep/envs/keras-py3.11*)/bin/python TORCH_PYTHON=.venv/bin/python \
#     DRIVER=.venv/bin/python bash benchmarks/gpu_keras_session.sh --rehearse
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/gpu_keras_session}; mkdir -p "$out"
py=${PYTHON:-python3}; tpy=${TORCH_PYTHON:-$py}; driver=${DRIVER:-$py}
rehearse=false; [[ ${1:-} == --rehearse ]] && rehearse=true

source benchmarks/_session.sh
machine_note

if $rehearse; then
  platform=cpu; model=(--model resnet8_cifar --image-size 32 --batch-per-gpu 16); steps=(--warmup-steps 3 --steps 10)
  torch_device=cpu; threads=1; engine=(resnet8_cifar 32 16 1 13 3); scale=(--scale full --emulate-gpus 1)
else
  platform=gpu; model=(--model resnet50_v1 --image-size 224 --batch-per-gpu 256); steps=(--warmup-steps 10 --steps 40)
  torch_device=cuda; threads=8; engine=(resnet50_v1 224 256 1 50 10); scale=(--scale full)
fi

# 1. Keras and its pure dependencies from their wheels, offline and without pip's dependency check: h5py stays behind
#    (Keras imports it only to save .h5 files), so .gpu-keras/ (4.5 MB) and .gpu-torch/ fit one call's 64 MiB. Then
#    each backend's versions.
if ! $rehearse; then
  step 01_install_keras 120 bash -c "$py -m pip install -q --no-index --no-deps .gpu-keras/*.whl 2>&1 | grep -vi warning; \
    [ -f .gpu-torch/install.sh ] && bash .gpu-torch/install.sh; \
    $py -c 'import keras, jax; print(\"keras\", keras.version(), \"jax\", jax.__version__, jax.devices())'"
  ray_exec_bits "$driver"
fi
# 2. The JAX backend: plain JAX, then plain Keras on JAX.
step 02_jax_peer 120 "$py" benchmarks/jax_peer.py --platform $platform "${model[@]}" "${steps[@]}" --precision bf16
step 03_keras_peer_jax 120 "$py" benchmarks/keras_peer.py --backend jax --platform $platform "${model[@]}" "${steps[@]}" --precision bf16
# 3. The torch backend: plain Keras on torch, then plain PyTorch (bf16 autocast, channels_last on the GPU).
step 04_keras_peer_torch 120 "$tpy" benchmarks/keras_peer.py --backend torch --platform $platform "${model[@]}" "${steps[@]}" --precision bf16
step 05_torch_peer 90 "$tpy" -m torch.distributed.run --standalone --nproc_per_node 1 benchmarks/torch_ddp_peer.py \
  "${model[@]}" "${steps[@]}" --precision bf16 --device $torch_device --threads $threads
# 4. The engine's trials: one-trial sweep files, framework keras, each backend (issue 43's trainable).
if [ -d trainables/keras ]; then
  for backend in jax torch; do
    read -r m size batch epochs spe warm <<< "${engine[*]}"
    file="$out/keras_$backend.yaml"
    printf 'name: keras_%s\ndescription: "gpu_keras_session: one trial"\nfixed:\n  framework: keras\n  keras_backend: %s\n  model: %s\n  image_size: %s\n  num_gpus: 1\n  batch_per_gpu: %s\n  precision: bf16\n  epochs: %s\n  steps_per_epoch: %s\n  warmup_steps: %s\n  data: synthetic\n  lr: 0.1\n' \
      "$backend" "$backend" "$m" "$size" "$batch" "$epochs" "$spe" "$warm" > "$file"
    step "06_engine_$backend" 180 bash -c "$driver -m sweep run $file ${scale[*]} --results /tmp/gks-results && \
      $driver -c \"import glob, pandas as pd; t = pd.read_parquet(sorted(glob.glob('/tmp/gks-results/keras_$backend/*/trials'))[-1]); \
print(t[['framework', 'model', 'status', 'steady_images_per_sec']].to_string())\""
  done
else
  echo "no trainables/keras/: the engine's Keras steps are left out" | tee "$out/06_engine_skipped.txt"
fi
