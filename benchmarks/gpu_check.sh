#!/usr/bin/env bash
# benchmarks/gpu_check.sh [--dry-run] [--pack] [--only STEP,...]: issue 22's and 23's checks on the GPU machine, in one
# go (under 10 minutes there; --only runs the named steps: gpu_tests, long_scan, timings, reproduce_short,
# reproduce_long, issue41; and, not by default, kernels and long_bf16).
#
# issue41 (issue 41 items 1 and 4): benchmarks/bench_gpu.py --issue41, random bf16 models of Llama-3-8B's shape at
# T = 32,768 and SmolLM2-135M's at T = 131,072: the plain forward, the default scan and stats="full" (through the
# compiled FlexAttention call on CUDA), with peak device memory, into issue41.json. Alone it fits one 8-minute device
# call: `--pack --only gpu_tests,issue41 --tests-k flex` (the three flex tests of tests/gpu, then the rows;
# limits 120 s + 360 s).
#
# long_scan (issue 23): benchmarks/bench_gpu.py --long-only, the scan at T = 131,072 beside a plain forward, written
# to long_scan.json. long_bf16: its bfloat16 SmolLM2-shape row only, with a cProfile and torch.profiler's kernel
# table of one more scan (long_bf16.txt), the plain forward and the scan warmed up at full length and timed 3 times,
# into long_bf16.json. kernels: one layer's attention at that length through
# each CUDA kernel (`bench_gpu.py --kernels`), into kernels.json.
#
# Everything goes under $OUT (a temporary folder when unset): gpu_check.log, env.json, gpu_tests.txt/.xml (the
# tests marked `gpu`: CUDA vs CPU agreement and determinism of bb train, series train, consensus simulate, phase and
# model, paths sample; memory refusal), timings.json (benchmarks/bench_gpu.py: BB step, phase diagram, consensus
# simulate, paths sample and solve, GPU beside CPU; rewritten after each row) and runs/reproduce/ (the long
# reproduction targets R9, R10, R11, R19-R22 on the GPU, with their run folders and reproduction.json).
#
# attnlab runs from PYTHONPATH=. under the machine's own torch. ray, plotly and gguf are not needed: nothing here
# imports them (sweeps and Ray-parallel runs are skipped); without plotly the reports are written with a stub
# plotly.min.js (attnlab.reports.page: they open without their interactive views). Wheels that the machine lacks (plotly;
# any of the others) are installed from benchmarks/wheels/ with --no-index when that folder is there: `make
# gpu-wheels` fills it here (plotly at the lock's version, 9.7 MB), and the device call carries it.
#
# --pack: at the end, everything under $OUT goes into $OUT/gpu_check.tar.gz and only a few summary files stay beside
# it (gpu_check.log, timings.json, long_scan.json, issue41.json, gpu_tests.xml, reproduction_short.json,
# reproduction_long.json; env.json is in the archive and on the log's "environment" line): the device tool brings
# back at most 8 files, none deeper than two folders.
#
# --tests-k EXPR: only the gpu tests that pytest's -k EXPR selects.
#
# --dry-run: the same steps on the CPU at tiny sizes (tiny profile, R3 and R4: bb training runs), in about a minute; the
# tests marked `gpu` skip there. tests/core/test_gpu_check.py runs it.
set -uo pipefail
cd "$(dirname "$0")/.."
DRY=0 PACK=0 ONLY=gpu_tests,long_scan,timings,reproduce_short,reproduce_long,issue41 TESTS_K=
while [[ $# -gt 0 ]]; do
  case $1 in
  --dry-run) DRY=1 ;;
  --pack) PACK=1 ;;
  --only) ONLY=${2:?--only needs STEP,...}; shift ;;
  --tests-k) TESTS_K=${2:?--tests-k needs a pytest -k expression}; shift ;;
  *) echo "gpu_check.sh: unknown argument $1 (use --dry-run, --pack, --only STEP,..., --tests-k EXPR)" >&2; exit 2 ;;
  esac
  shift
done
OUT=${OUT:-$(mktemp -d)}
PY=${PYTHON:-python3}
export PYTHONPATH=.${PYTHONPATH:+:$PYTHONPATH} MPLBACKEND=Agg TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1
mkdir -p "$OUT/runs"
STATUS=0
log() { echo "[gpu_check $(date +%H:%M:%S)] $*" | tee -a "$OUT/gpu_check.log"; }
step() {  # step NAME SECONDS CMD...: run with a time limit, log the exit status, keep going (skipped unless in ONLY)
  local name=$1 limit=$2; shift 2
  [[ ",$ONLY," == *",$name,"* ]] || { log "skip $name"; return 0; }
  log "start $name (limit ${limit}s)"
  local t0=$SECONDS
  timeout "$limit" "$@" >"$OUT/$name.txt" 2>&1
  local rc=$?
  log "end $name: exit $rc after $((SECONDS - t0))s"
  [[ $rc -ne 0 ]] && STATUS=1
  return 0
}

missing=$($PY -c 'import importlib.util as u; print(" ".join(m for m in ("matplotlib", "safetensors", "tqdm",
"sklearn", "threadpoolctl", "pandas", "scipy", "transformers", "pytest", "plotly", "ray", "gguf")
if u.find_spec(m) is None))')
log "modules missing here: ${missing:-none}"
if [[ -d benchmarks/wheels ]]; then
  for m in $missing; do
    case $m in ray | gguf) ;;  # not needed: Ray-parallel runs are skipped, SmolLM2's GGUF stays behind
    *) $PY -m pip install -q --no-index --no-deps --find-links benchmarks/wheels "$m" >>"$OUT/gpu_check.log" 2>&1 \
         || log "could not install $m from benchmarks/wheels" ;;
    esac
  done
fi
$PY - >"$OUT/env.json" <<'PYEOF'
import json, os, torch
info = {"torch": torch.__version__, "cuda_available": torch.cuda.is_available(), "cpu_count": os.cpu_count(),
        "load_1min": os.getloadavg()[0]}
if torch.cuda.is_available():
    p = torch.cuda.get_device_properties(0)
    info |= {"gpu": p.name, "gpu_memory_gib": round(p.total_memory / 2**30, 1), "cuda": torch.version.cuda}
print(json.dumps(info, indent=2))
PYEOF
log "environment: $(tr -d '\n' <"$OUT/env.json")"

# limits (s): tests, timings, the short targets, R11 (the paper-scale run: 10,000 steps), the long scans, issue 41's
# rows; 1,035 s in all on the GPU: more than one command's 600 s, so a run names its steps with --only (gpu_tests:
# its 33 tests took over 75 s on the H200 of 2026-12-04, 22 done at that limit)
if [[ $DRY -eq 1 ]]; then
  DEVICE=cpu PROFILE=tiny SHORT=R3 LONG=R4 TINY=--tiny LIMITS=(120 180 300 300 120 120)  # R9-R22: full profile only
else
  DEVICE=cuda PROFILE=full SHORT=R9,R10,R19,R20,R21,R22 LONG=R11 TINY= LIMITS=(120 120 135 150 150 360)
fi

step gpu_tests "${LIMITS[0]}" $PY -m pytest -q -m gpu tests/gpu -p no:cacheprovider --junitxml "$OUT/gpu_tests.xml" \
  ${TESTS_K:+-k "$TESTS_K"}
step long_scan "${LIMITS[4]}" $PY benchmarks/bench_gpu.py --device "$DEVICE" $TINY --long-only \
  --out "$OUT/long_scan.json"
step issue41 "${LIMITS[5]}" $PY benchmarks/bench_gpu.py --device "$DEVICE" $TINY --issue41 --out "$OUT/issue41.json"
step kernels 60 $PY benchmarks/bench_gpu.py --device "$DEVICE" $TINY --kernels --out "$OUT/kernels.json"
step long_bf16 "${LIMITS[4]}" $PY benchmarks/bench_gpu.py --device "$DEVICE" $TINY --long-only --profile \
  --long-repeats 3 --long-shapes smollm2:bfloat16 --out "$OUT/long_bf16.json"
step timings "${LIMITS[1]}" $PY benchmarks/bench_gpu.py --device "$DEVICE" $TINY --out "$OUT/timings.json"
# two reproduce runs, so that a time limit hit by R11 keeps the short targets' reproduction.json
step reproduce_short "${LIMITS[2]}" $PY -m attnlab reproduce bb --profile "$PROFILE" --targets "$SHORT" \
  --device "$DEVICE" --threads 0 --out "$OUT/runs/reproduce/short"
step reproduce_long "${LIMITS[3]}" $PY -m attnlab reproduce bb --profile "$PROFILE" --targets "$LONG" \
  --device "$DEVICE" --threads 0 --out "$OUT/runs/reproduce/long"
for part in short long; do
  [[ -f "$OUT/runs/reproduce/$part/reproduction.json" ]] && cp "$OUT/runs/reproduce/$part/reproduction.json" \
    "$OUT/reproduction_$part.json"
done
log "done: status $STATUS (0: every step exited 0); results in $OUT"
if [[ $PACK -eq 1 ]]; then  # checkpoints stay out (tens of MB at paper scale); metrics, configs and figures go in
  ARCHIVE=$(mktemp --suffix=.tar.gz)
  tar czf "$ARCHIVE" -C "$OUT" --exclude='*.safetensors' . && mv "$ARCHIVE" "$OUT/gpu_check.tar.gz" &&
    find "$OUT" -mindepth 1 -maxdepth 1 ! -name gpu_check.tar.gz ! -name gpu_check.log ! -name issue41.json \
      ! -name timings.json ! -name long_scan.json ! -name long_bf16.json ! -name kernels.json ! -name gpu_tests.xml \
      ! -name 'reproduction_*.json' -exec rm -rf {} +
fi
exit $STATUS
