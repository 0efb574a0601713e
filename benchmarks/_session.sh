# What the GPU sessions' scripts share (sourced by gpu_torch_session.sh and gpu_keras_session.sh; $out set before).

step() {  # step NAME SECONDS COMMAND...: run it under its limit, its output to the console and to $out/NAME.txt
  # $STEPS, a regular expression, keeps the steps whose names match it (all when unset): so one device call can
  # order steps across both scripts by what is still missing.
  local name=$1 limit=$2 start=$SECONDS; shift 2
  [[ -n ${STEPS:-} && ! $name =~ $STEPS ]] && return 0
  echo "== $name (limit ${limit} s): $*"
  PYTHONUNBUFFERED=1 timeout -k 10 "$limit" "$@" 2>&1 | tee "$out/$name.txt"
  echo "== $name: rc ${PIPESTATUS[0]} in $((SECONDS - start)) s" | tee -a "$out/$name.txt"
}

machine_note() {  # the machine, its GPU and the commit, in $out/00_machine.txt
  { date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1; nproc; git log -1 --format='%H %s' 2>/dev/null; } \
    > "$out/00_machine.txt"
}

ray_exec_bits() {  # gpu_bundle_torch.sh unpacks Ray's wheel with `python -m zipfile`, which drops the exec bits of Ray's
  # two programs: without them Ray cannot start ("Permission denied: .../gcs_server", 2026-11-26).
  local site
  site=$("$1" -c 'import ray, os; print(os.path.dirname(ray.__file__))' 2>/dev/null) \
    && chmod +x "$site/core/src/ray/gcs/gcs_server" "$site/core/src/ray/raylet/raylet" 2>/dev/null
  return 0
}
