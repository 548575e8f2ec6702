#!/usr/bin/env bash
# The CUDA check, as one command to run on a machine with an NVIDIA GPU that reaches no package
# registry: build llama.cpp's CUDA backend and the
# native core from the carried sources, list the device, compare every module graph on cuda:0
# with the CPU, write the real-dimension module set with the whole 36-layer LLM (F16, ~16 GB),
# and benchmark it (LLM and TTS per token, Token2Wav RTF, the speak pipeline, duplex units).
#
#   scripts/gpu-carry.sh                      # once, here: fills .carry/ (trimmed sdist + wheels)
#   bash scripts/gpu-check.sh                 # there, from the repository root, .carry carried
#
# Results go to $OUT (default ./gpu-check-out): gpu-check.log
# (every step's full output), summary.json, parity.json, llm_tts.json, token2wav.json,
# duplex.json, load.json, bench/<run>.json -- 8 files, few enough to copy back from a remote machine. The last
# lines printed are the summary.
#
# Environment:
#   OMNI_GPU_CHECK_CPU=1       the same steps without CUDA (test the script on a CPU machine):
#                              CPU build, tests on "cpu", a 2-layer LLM, small benchmarks
#   OMNI_GPU_CHECK_STEPS       comma list of steps to run (default: all, in this order):
#                              env,deps,models,llama,core,info,parity,validate,llm_tts,token2wav,bench,
#                              duplex,slots
#   OMNI_GPU_CHECK_SLOTS       slot counts of the slots step (default 1,4 on the GPU: its N single-slot
#                              workers hold N copies of the weights, so 8 does not fit beside them)
#   OMNI_GPU_CHECK_LLM_LAYERS  LLM layers of the generated set (36 on the GPU, 2 with CPU=1)
#   OMNI_GPU_CHECK_BUDGET_S    seconds the whole check may take (default 570 on the GPU, so it
#                              ends inside a 10-minute command limit; 0 = none);
#                              a step that would start with too little time left is skipped
#   OMNI_GPU_CHECK_WORK        scratch folder: site/, build/, models/ (default /tmp/omni-gpu-check, or
#                              .gpu-work in the checkout when only that file system has room)
#   OMNI_GPU_CHECK_JOBS        parallel compile jobs (default: all CPUs)
#   PYTHON                     the interpreter (default python3)
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
PY=${PYTHON:-python3}
CPU_MODE=${OMNI_GPU_CHECK_CPU:-0}
OUT=${OUT:-$ROOT/gpu-check-out}
WORK=${OMNI_GPU_CHECK_WORK:-}
if [ -z "$WORK" ]; then
  # /tmp, unless its file system is too small for the set and the checkout's is not
  need_kb=$(( (CPU_MODE == 1 ? 10 : 26) * 1024 * 1024 ))
  free_kb() { mkdir -p "$1" && df -Pk "$1" | awk 'NR == 2 { print $4 }'; }
  WORK=/tmp/omni-gpu-check
  if [ "$(free_kb /tmp)" -lt "$need_kb" ] && [ "$(free_kb "$ROOT")" -ge "$need_kb" ]; then WORK=$ROOT/.gpu-work; fi
fi
export OMNI_GPU_CHECK_WORK=$WORK OUT  # the steps (run as separate processes) use the same folders
CARRY=${OMNI_GPU_CHECK_CARRY:-$ROOT/.carry}
JOBS=${OMNI_GPU_CHECK_JOBS:-$(nproc)}
ALL_STEPS=env,deps,models,llama,core,info,parity,validate,llm_tts,token2wav,bench,duplex,slots
STEPS=",${OMNI_GPU_CHECK_STEPS:-$ALL_STEPS},"
if [ "$CPU_MODE" = 1 ]; then
  DEV=cpu LAYERS=${OMNI_GPU_CHECK_LLM_LAYERS:-2} BUDGET=${OMNI_GPU_CHECK_BUDGET_S:-0}
  GEN_WORKERS=2 T2W_THREADS=1,2 BENCH_ARGS=(--t2w-threads 2 --pin off --prompts story --repeats 3 --warmup 1)
  DUPLEX_UNITS=5 SLOTS=${OMNI_GPU_CHECK_SLOTS:-1,2}
else
  DEV=cuda:0 LAYERS=${OMNI_GPU_CHECK_LLM_LAYERS:-36} BUDGET=${OMNI_GPU_CHECK_BUDGET_S:-570}
  GEN_WORKERS=4 T2W_THREADS=4,8,16 BENCH_ARGS=(--t2w-threads 8 --repeats 3 --warmup 1)
  DUPLEX_UNITS=20 SLOTS=${OMNI_GPU_CHECK_SLOTS:-1,4}
fi
SITE=$WORK/site MODELS=$WORK/models
mkdir -p "$OUT" "$WORK"
LOG=$OUT/gpu-check.log
STEPS_TSV=$WORK/steps.tsv
START=$(date +%s)
FAILED=0

say() { echo "[gpu-check +$(( $(date +%s) - START ))s] $*" | tee -a "$LOG"; }
left() { [ "$BUDGET" = 0 ] && echo 100000 || echo $(( BUDGET - ($(date +%s) - START) )); }
record() { printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "${4:-}" >> "$STEPS_TSV"; }

# run_step NAME MIN_SECONDS: runs step_NAME when selected and at least MIN_SECONDS are left, in
# a fresh `bash gpu-check.sh --step NAME` under a timeout of the time left (timeout ends the
# step's whole process group); its output goes to the log.
run_step() {
  local name=$1 need=$2
  case "$STEPS" in *",$name,"*) ;; *) return 0 ;; esac
  local remaining; remaining=$(left)
  if [ "$remaining" -lt "$need" ]; then
    say "$name: skipped, ${remaining}s left of the budget (needs ${need}s)"
    record "$name" skipped 0 "out of time"
    return 0
  fi
  say "$name: start"
  echo "===== $name" >> "$LOG"
  local t0 rc note; t0=$(date +%s)
  timeout --kill-after=5 "$remaining" bash "$ROOT/scripts/gpu-check.sh" --step "$name" >> "$LOG" 2>&1
  rc=$?
  local dt=$(( $(date +%s) - t0 ))
  if [ $rc -eq 0 ]; then
    say "$name: ok (${dt}s)"; record "$name" ok "$dt"
  else
    if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then note="timed out"; else note="exit $rc"; fi
    say "$name: FAILED, $note (${dt}s); see $LOG"; record "$name" failed "$dt" "$note"
    FAILED=1
  fi
  return $rc
}

export PYTHONPATH=$SITE${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1 CMAKE_BUILD_PARALLEL_LEVEL=$JOBS
PIP=("$PY" -m pip install --no-index --no-deps --no-build-isolation --no-compile --disable-pip-version-check
     --no-cache-dir --upgrade --target "$SITE")
# -P: the checkout (the working directory) must not shadow the installed package
PYRUN=("$PY" -P)

step_env() {  # facts only: nothing here fails the step
  date -u; uname -a; nproc; free -g; df -h "$WORK" "$ROOT" || true
  "$PY" --version; cmake --version | head -1 || true; ninja --version || true
  if [ "$CPU_MODE" != 1 ]; then
    nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm --format=csv || true
    "$NVCC" --version | tail -2 || true
    echo "CUDA $CUDA_HOME; cuBLAS: include ${CUBLAS_INC:-none}, library ${CUBLAS_LIB:-none}"
  fi
}

step_deps() {
  [ -d "$CARRY/wheels" ] || { echo "no $CARRY/wheels: run scripts/gpu-carry.sh and carry .carry"; return 1; }
  # scipy-openblas32 always: the extension finds it through a run path relative to itself
  mapfile -t missing < <("$PY" scripts/gpu_check.py missing-wheels "$CARRY/wheels" --always scipy-openblas32 |
    sed "/^$/d")
  echo "installing ${#missing[@]} carried wheels: ${missing[*]:-none}"
  [ ${#missing[@]} -eq 0 ] || "${PIP[@]}" "${missing[@]}"
}

# The cuBLAS headers and libraries: the CUDA toolkit's, else those of the nvidia-cublas wheel
# that PyTorch brings (the toolkit on the GPU image may carry nvcc and cudart only).
find_cuda() {
  NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
  CUDA_HOME=${CUDA_HOME:-$(dirname "$(dirname "$(readlink -f "$NVCC")")")}
  CUBLAS_INC= CUBLAS_LIB=
  if [ -f "$CUDA_HOME/include/cublas_v2.h" ] && compgen -G "$CUDA_HOME/lib64/libcublas.so*" > /dev/null; then
    CUBLAS_INC=$CUDA_HOME/include CUBLAS_LIB=$CUDA_HOME/lib64
  else
    CUBLAS_INC=$("$PY" -c "import glob, sys; print(next(iter(sorted(g for p in sys.path for g in glob.glob(p + '/nvidia/*/include/cublas_v2.h'))), '').rsplit('/', 1)[0])")
    [ -n "$CUBLAS_INC" ] && CUBLAS_LIB=$(dirname "$CUBLAS_INC")/lib
  fi
  export LD_LIBRARY_PATH=${CUBLAS_LIB:+$CUBLAS_LIB:}$CUDA_HOME/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
}

step_llama() {
  local sdist; sdist=$(ls "$CARRY"/sdist/llama_cpp_python-*.tar.gz 2> /dev/null | head -1)
  [ -n "$sdist" ] || { echo "no llama-cpp-python sdist in $CARRY/sdist"; return 1; }
  # unpacked once to a fixed place outside any git checkout, so the build directory is reused
  local src; src=$WORK/src/$(basename "$sdist" .tar.gz)
  if [ ! -d "$src" ]; then mkdir -p "$WORK/src" && tar xzf "$sdist" -C "$WORK/src" || return 1; fi
  # no mtmd (only a CPU test compares our vision encoder with it)
  local args="-DGGML_NATIVE=OFF -DLLAVA_BUILD=OFF"
  if [ "$CPU_MODE" != 1 ]; then
    [ -n "$CUBLAS_INC" ] || { echo "no cuBLAS headers (CUDA toolkit or nvidia-cublas wheel)"; return 1; }
    local lib; lib=$(ls "$CUBLAS_LIB"/libcublas.so* | sort | tail -1)
    local lt; lt=$(ls "$CUBLAS_LIB"/libcublasLt.so* | sort | tail -1)
    # sm_90 only; flash-attention vector kernels for F16 K/V only (our KV caches); no NCCL (one
    # GPU); no VMM pool (its driver-API link needs libcuda.so at build time)
    args="$args -DGGML_CUDA=on -DCMAKE_CUDA_COMPILER=$NVCC -DCMAKE_CUDA_ARCHITECTURES=90-real"
    args="$args -DGGML_CUDA_FA_QUANTS=f16-f16 -DGGML_CUDA_NCCL=OFF -DGGML_CUDA_NO_VMM=ON"
    args="$args -DCUDA_cublas_LIBRARY=$lib -DCUDA_cublasLt_LIBRARY=$lt"
    args="$args -DCMAKE_CUDA_FLAGS=-I$CUBLAS_INC -DCMAKE_CXX_FLAGS=-I$CUBLAS_INC"
  fi
  echo "CMAKE_ARGS=$args"
  CMAKE_ARGS="$args" "${PIP[@]}" -v -C "build-dir=$WORK/build/llama" "$src"
}

step_core() {
  "${PIP[@]}" -C "build-dir=$WORK/build/omni" "$ROOT"
}

step_info() {
  "${PYRUN[@]}" -c "import llama_omni_py, sys; print(llama_omni_py.__file__); assert llama_omni_py.__file__.startswith('$SITE')"
  "${PYRUN[@]}" -m llama_omni_py info
  "${PYRUN[@]}" -m llama_omni_py info --json > "$WORK/info.json"
  "${PYRUN[@]}" -c "import llama_omni_py as o; b = o.backends(); print(b); assert '$DEV' in b, '$DEV not listed'"
}

step_parity() {
  OMNI_TEST_DEVICE=$DEV OMNI_PARITY_REPORT=$OUT/parity.json \
    "${PYRUN[@]}" -m pytest tests/modules/test_device_parity.py -v -p no:cacheprovider --durations=0
}

step_validate() {
  "${PYRUN[@]}" -m llama_omni_py info --model-dir "$MODELS" --device "$DEV"
}

step_llm_tts() {
  "${PYRUN[@]}" benchmarks/llm_tts.py --model-dir "$MODELS" --device "$DEV" --threads "$JOBS" --tokens 64 \
    --out "$OUT/llm_tts.json"
}

step_token2wav() {
  "${PYRUN[@]}" benchmarks/token2wav.py --model-dir "$MODELS" --device "$DEV" --threads "$T2W_THREADS" \
    --chunks 5 --no-reference --out "$OUT/token2wav.json"
}

step_duplex() {
  rm -rf "$WORK/duplex-bench"
  "${PYRUN[@]}" -m llama_omni_py bench --mode duplex --model-dir "$MODELS" --device "$DEV" \
    --units "$DUPLEX_UNITS" --out-dir "$WORK/duplex-bench" --allow-realtime-miss
  cp "$WORK"/duplex-bench/*.json "$OUT/duplex.json"
}

step_bench() {
  "${PYRUN[@]}" -m llama_omni_py bench --device "$DEV" --model-dir "$MODELS" "${BENCH_ARGS[@]}" \
    --out-dir "$OUT/bench" --allow-realtime-miss
}

step_slots() {  # an engine of N slots against N single-slot workers, text and duplex sessions at once
  rm -rf "$WORK/load-bench"
  "${PYRUN[@]}" -m llama_omni_py bench --mode load --device "$DEV" --model-dir "$MODELS" --slots "$SLOTS" \
    --kinds text,duplex --max-new-tokens 64 --repeats 1 --out-dir "$WORK/load-bench"
  cp "$WORK"/load-bench/*.json "$OUT/load.json"
}

if [ "${1:-}" = --step ]; then  # one step, run by run_step; its first failing command fails it
  [ "$CPU_MODE" = 1 ] || find_cuda
  set -e
  "step_$2"
  exit 0
fi

: > "$LOG"
: > "$STEPS_TSV"
say "llama-omni-py CUDA check: device $DEV, LLM layers $LAYERS, budget ${BUDGET}s (0 = none), $JOBS jobs"
say "work $WORK, results $OUT"
run_step env 0
run_step deps 0

# The set is written by plain Python while the native code compiles (the longest step).
GEN_PID=
case "$STEPS" in *,models,*)
  rm -rf "$MODELS"
  say "models: start (background): real set, $LAYERS LLM layers, $GEN_WORKERS writer threads"
  rm -f "$WORK/models.rc"
  gen_limit=$(( $(left) - 60 ))  # leave a minute to report
  ( t0=$(date +%s)
    timeout --kill-after=5 "$gen_limit" "$PY" scripts/gpu_check.py models "$MODELS" --llm-layers "$LAYERS" \
      --workers "$GEN_WORKERS" > "$WORK/models.log" 2>&1
    echo $? $(( $(date +%s) - t0 )) > "$WORK/models.rc" ) &
  GEN_PID=$! ;;
esac

run_step llama 60 && run_step core 30 && run_step info 10
BUILT=$?
if [ $BUILT -ne 0 ]; then
  say "the build or the device check failed: no tests or benchmarks"
else
  run_step parity 30
fi

if [ -n "$GEN_PID" ]; then
  wait "$GEN_PID"
  read -r gen_rc gen_s < "$WORK/models.rc" || { gen_rc=1; gen_s=0; }
  { echo "===== models"; cat "$WORK/models.log"; } >> "$LOG"
  if [ "$gen_rc" = 0 ]; then
    say "models: ok (${gen_s}s, in the background)"; record models ok "$gen_s" "background, $LAYERS LLM layers"
  else
    say "models: FAILED (exit $gen_rc; 124: out of time); see $LOG"; record models failed "$gen_s" "exit $gen_rc"
    FAILED=1
    rm -rf "$MODELS"
  fi
fi

if [ $BUILT -eq 0 ] && [ -d "$MODELS" ]; then
  run_step validate 10
  run_step llm_tts 40
  run_step token2wav 30
  run_step bench 90
  run_step duplex 45
  run_step slots 90
fi

say "done in $(( $(date +%s) - START ))s"
"$PY" scripts/gpu_check.py summary "$OUT" "$STEPS_TSV" --info "$WORK/info.json" 2>&1 | tee -a "$LOG"
exit $FAILED
