#!/usr/bin/env bash
# Runs `llama-omni bench` under `taskset -c <CPUs of the device's NUMA node>`. The node comes from
# the placement plan on this host (never a CPU range copied from another host); a current affinity
# mask outside the node is refused unless --force.
#
#   scripts/bench-pinned.sh [--device D] [--force] [--dry-run] [--out-dir DIR] [-- BENCH ARGS...]
#   scripts/bench-pinned.sh --sweep [--threads "8 16 24"] [--queues "1 16"] [...] [-- BENCH ARGS...]
#
# --sweep runs every OMNI_T2W_THREADS x {pinned, unpinned} x OMNI_TTS_QUEUE combination (one
# `llama-omni bench` process each, one JSON per run in --out-dir), then benchmarks/report.py.
# Exit status: 3 refused (mask outside the node), 1 a run was invalid, 0 otherwise.
# Test hooks: OMNI_BENCH_SYS_NODE / OMNI_BENCH_SYS_PCI (sysfs directories), OMNI_BENCH_MASK (CPU list
# used instead of this shell's mask), OMNI_BENCH_PCI_BUS_ID (the device's PCI address).
set -euo pipefail

PYTHON=${PYTHON:-python3}
LLAMA_OMNI=${LLAMA_OMNI:-llama-omni}
device=auto force=() dry=0 sweep=0 out_dir=bench-results
threads=${OMNI_T2W_THREADS:-16} queues=${OMNI_TTS_QUEUE:-16}
while [[ $# -gt 0 ]]; do
  case $1 in
    --device) device=$2; shift 2 ;;
    --force) force=(--force); shift ;;
    --dry-run) dry=1; shift ;;
    --sweep) sweep=1; shift ;;
    --threads) threads=$2; shift 2 ;;
    --queues) queues=$2; shift 2 ;;
    --out-dir) out_dir=$2; shift 2 ;;
    --) shift; break ;;
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    *) echo "bench-pinned: unknown option $1 (bench options go after --)" >&2; exit 2 ;;
  esac
done
bench_args=("$@")

pin_args=(--device "$device" "${force[@]}")
[[ -n ${OMNI_BENCH_SYS_NODE:-} ]] && pin_args+=(--sys-node "$OMNI_BENCH_SYS_NODE")
[[ -n ${OMNI_BENCH_SYS_PCI:-} ]] && pin_args+=(--sys-pci "$OMNI_BENCH_SYS_PCI")
[[ -n ${OMNI_BENCH_MASK:-} ]] && pin_args+=(--mask "$OMNI_BENCH_MASK")
[[ -n ${OMNI_BENCH_PCI_BUS_ID:-} ]] && pin_args+=(--pci-bus-id "$OMNI_BENCH_PCI_BUS_ID")
rc=0
# From / : in a checkout's root, `-m llama_omni_py` would import the uncompiled source tree.
plan=$(cd / && "$PYTHON" -m llama_omni_py.bench.pinning "${pin_args[@]}") || rc=$?
[[ $rc -ne 0 ]] && exit "$rc"
read -r node cpus <<<"$plan"
echo "bench-pinned: device $device -> NUMA node $node, CPUs $cpus" >&2

# run_one pinned|unpinned TAG: one bench process, with OMNI_* knobs from the environment
run_one() {
  local mode=$1 tag=$2 cmd
  cmd=("$LLAMA_OMNI" bench --device "$device" --out-dir "$out_dir" --tag "$tag" "${bench_args[@]}")
  if [[ $mode == pinned ]]; then
    cmd=(env OMNI_BENCH_TASKSET="$cpus" taskset -c "$cpus" "${cmd[@]}")
  fi
  if [[ $dry -eq 1 ]]; then
    echo "OMNI_T2W_THREADS=${OMNI_T2W_THREADS:-} OMNI_TTS_QUEUE=${OMNI_TTS_QUEUE:-} ${cmd[*]}"
    return 0
  fi
  "${cmd[@]}"
}

failed=0
if [[ $sweep -eq 0 ]]; then
  run_one pinned pinned || failed=1
else
  for t in $threads; do
    for q in $queues; do
      for mode in pinned unpinned; do
        OMNI_T2W_THREADS=$t OMNI_TTS_QUEUE=$q run_one "$mode" "$mode" || failed=1
      done
    done
  done
  report="$(dirname "$0")/../benchmarks/report.py"
  if [[ $dry -eq 0 && -f $report ]]; then
    "$PYTHON" "$report" "$out_dir"/*.json --out "$out_dir/report" || failed=1
  fi
fi
exit "$failed"
