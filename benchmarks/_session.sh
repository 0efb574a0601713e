# What the GPU sessions' scripts share (sourced by gpu_torch_session.sh and gpu_keras_session.sh; $out set before).

step() {  # step NAME SECONDS COMMAND...: run it under its limit, its output to the console and to $out/NAME.txt
  local name=$1 limit=$2 start=$SECONDS; shift 2
  echo "== $name (limit ${limit} s): $*"
  PYTHONUNBUFFERED=1 timeout -k 10 "$limit" "$@" 2>&1 | tee "$out/$name.txt"
  echo "== $name: rc ${PIPESTATUS[0]} in $((SECONDS - start)) s" | tee -a "$out/$name.txt"
}

machine_note() {  # the machine, its GPU and the commit, in $out/00_machine.txt
  { date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1; nproc; git log -1 --format='%H %s' 2>/dev/null; } \
    > "$out/00_machine.txt"
}
