#!/usr/bin/env bash
# The GPU path of the harness checked on a machine with an NVIDIA GPU, in under 8 minutes, without network:
#
#   scripts/gpu-check.sh [--nsys PATH] [--wheels DIR] [--out DIR] [--device cuda|cpu] [--budget SECONDS]
#                        [--plants | --only generate | --only generate-overhead]
#
# --nsys    the nsys to use: its binary, a folder holding an unpacked package (usr/lib/nsight-systems/bin/nsys),
#           or a .tar.xz made by scripts/gpu-pack.sh (unpacked into OUT). Default: as the harness finds one.
# --wheels  wheels of what a PyTorch image lacks (scripts/gpu-pack.sh), installed without network into
#           OUT/site, put first on PYTHONPATH over PYTHON's packages (its torch). Default: .venv if there is one.
# PYTHON    the python that holds torch (default python3).
# --out     the folder for everything: gpu-check.log (each step's command, output, time and exit code) and
#           every file the steps write (results.sqlite, nsys_profiles/, traces, pages). Default: gpu-check-DATE.
# --device  cpu rehearses the script on a machine without a GPU (steps that need CUDA are skipped).
# --budget  seconds for all steps (default 470); a step that would start past it is skipped and said so.
# --plants  the catalogue of planted causes instead of the steps below: the environment, then each cause of
#           `harness run MODEL --plant CAUSE --nsys` (bf16; its export in OUT/plants/CAUSE/) with `health` and
#           `advise --format json` of its export, then each as a program (`harness profile -- python -m
#           workloads.plants CAUSE`) with its `advise`. PLANT_MODEL (default small), PLANT_CAUSES (default all).
# --only generate   the environment and the generate steps alone (about 4 minutes on an H100): decode eager,
#                   --cuda-graphs and --compile, without and under nsys.
# --only generate-overhead   the environment, nsys's overhead on eager and --cuda-graphs decode, and both
#                   under torch.profiler (6 minutes at most; each group fits one call of 10 minutes).
# GPU_CHECK_SCALE=N  multiplies every step's limit (a rehearsal on a slow or busy CPU machine).
#
# Steps, each under its own time limit: the doctor (with its GPU self-test), `run medium --nsys`, the tables of
# its export, a CUDA-graph program under nsys (`harness profile`), the self-test's program captured 3 times,
# `overhead`, `run --profiler torch`, `run --memory`, `run --power` (energy from the samples the worker kept),
# a small sweep and its dashboard; then generate's decode eager, with --cuda-graphs and with --compile
# (reduce-overhead), without and (nsys there) under nsys, nsys's overhead on eager and --cuda-graphs decode,
# and both under torch.profiler. Before each capture it waits for
# any nsys of an earlier capture to end (suspected once of losing a later capture's kernels; on the H100 none
# was ever found) and logs the processes it found. Exit 0 when every step that ran passed; the log says which
# did not.
set -uo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
nsys_given="" wheels="" out="" device="cuda" budget="" plants="" only=""
while (($#)); do
  case "$1" in
    --nsys) nsys_given="$2"; shift 2 ;;
    --wheels) wheels="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --device) device="$2"; shift 2 ;;
    --budget) budget="$2"; shift 2 ;;
    --plants) plants=1; shift ;;
    --only) only="$2"; shift 2
      [[ "$only" == generate || "$only" == generate-overhead ]] ||
        { echo "unknown --only $only (generate or generate-overhead)" >&2; exit 2; } ;;
    -h|--help) sed -n '2,33p' "$0"; exit 0 ;;
    *) echo "unknown argument: $1 (--help)" >&2; exit 2 ;;
  esac
done
budget="${budget:-470}"
out="${out:-$PWD/gpu-check-$(date +%Y%m%d-%H%M%S)}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
log="$out/gpu-check.log"
started=$SECONDS
failed=()
say() { echo "$*" | tee -a "$log"; }

# --- what it runs with -------------------------------------------------------------------------------------
case "$nsys_given" in
  "") ;;
  *.tar.xz|*.txz)
    mkdir -p "$out/nsys" && { tar -C "$out/nsys" -xJf "$nsys_given" 2>/dev/null ||  # no xz: python's tarfile
      "${PYTHON:-python3}" -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2], filter="tar")' \
        "$nsys_given" "$out/nsys"; } && \
      export HARNESS_NSYS="$out/nsys/usr/lib/nsight-systems/bin/nsys" ;;
  *) if [[ -d "$nsys_given" ]]; then export HARNESS_NSYS="$nsys_given/usr/lib/nsight-systems/bin/nsys"
     else export HARNESS_NSYS="$nsys_given"; fi ;;
esac
python="${PYTHON:-python3}"
site=""
if [[ -n "$wheels" ]]; then
  # into a folder of their own, first on the path: the image's python (a virtual environment of its own,
  # on the lent H100s) keeps its torch and everything else it has
  "$python" -m pip install -q --no-index --no-deps --no-compile --target "$out/site" "$wheels"/*.whl \
    >>"$log" 2>&1 || say "warning: pip could not install the wheels of $wheels (see the log)"
  site="$out/site"
elif [[ -x "$root/.venv/bin/python" ]]; then
  python="$root/.venv/bin/python"
fi
export PYTHONPATH="$root${site:+:$site}${PYTHONPATH:+:$PYTHONPATH}"
export HARNESS_DB="sqlite:///$out/results.sqlite" HARNESS_CACHE_DIR="$out/cache" COLUMNS="${COLUMNS:-120}"
harness() { "$python" -m harness "$@"; }
nsys_path="${HARNESS_NSYS:-$("$python" -c 'from harness.execution.nsys import find_nsys; print(find_nsys().path)' 2>/dev/null)}"
nsys_root="${nsys_path%/usr/lib/nsight-systems/bin/nsys}"  # the installation: its nsys, launcher, importer
[[ "$nsys_root" == "$nsys_path" ]] && nsys_root="$(dirname "$nsys_path")"
export python device out nsys_root log root
cd "$out" || exit 1

# --- steps -------------------------------------------------------------------------------------------------
# no_nsys_left: wait (up to 60 s) until no nsys of an earlier capture runs; say which were still there
# (processes of this installation only: on a shared machine another user's nsys is not ours to wait for)
no_nsys_left() {
  local waited=0 pids
  while pids="$(pgrep -f -- "^$nsys_root/.*(nsys|nsys-launcher|QdstrmImporter)( |$)" | tr '\n' ' ')"; \
        [[ -n "${pids// /}" ]] && ((waited < 60)); do
    ((waited == 0)) && say "  waiting for nsys of an earlier capture: $(ps -o pid=,etimes=,args= -p ${pids// /,} 2>/dev/null | cut -c1-150 | tr '\n' ';')"
    sleep 2
    waited=$((waited + 2))
  done
  if [[ -n "${pids// /}" ]]; then
    say "  warning: nsys still running after 60 s (pids $pids): this capture may lose its kernels"
  elif ((waited)); then
    say "  the earlier nsys ended after ${waited} s"
  fi
}

# step NAME LIMIT [capture] -- COMMAND...: run COMMAND (a harness command or a shell function) under
# `timeout LIMIT`, its output into the log, its time and exit code after it
step() {
  local name="$1" limit=$(($2 * ${GPU_CHECK_SCALE:-1})) capture=""
  shift 2
  [[ "$1" == capture ]] && capture=1 && shift
  [[ "$1" == -- ]] && shift
  local left=$((budget - (SECONDS - started)))
  if ((left < limit / 3)); then
    say "== $name: skipped (${left} s of the ${budget} s budget left, the step takes up to ${limit} s)"
    failed+=("$name (skipped)")
    return
  fi
  ((limit > left)) && limit=$left
  say "== $name (limit ${limit} s): $*"
  [[ -n "$capture" ]] && no_nsys_left
  local t0=$SECONDS rc
  timeout --kill-after=10 "$limit" bash -c '"$@"' step "$@" >>"$log" 2>&1  # shell functions too (export -f)
  rc=$?
  say "-- $name: exit $rc in $((SECONDS - t0)) s$( ((rc == 124 || rc == 137)) && echo " (time limit)")"
  ((rc == 0)) || failed+=("$name (exit $rc)")
}

latest_export() { "$python" - <<'EOF'
import glob, os
found = sorted(glob.glob("nsys_profiles/*.sqlite"), key=os.path.getmtime)
print(found[-1] if found else "nsys_profiles/none.sqlite")
EOF
}

tables() {
  local export
  export="$(latest_export)"
  echo "export: $export"
  for cmd in "kernels --top 15" "nvtx-gpu --mode phase" "memops" "api --top 10" "launch --top 10" "health" "advise"; do
    echo "\$ harness $cmd $export"
    # shellcheck disable=SC2086
    harness $cmd "$export" --wide || echo "(exit $?)"
  done
}

graph_program() {
  "$python" -c 'from harness.experiments.gpu_selftest import PROGRAM; print(PROGRAM)' >cuda_graph.py
  harness profile --name cuda-graph -- "$python" cuda_graph.py || return
  local export
  export="$(latest_export)"
  harness kernels "$export" --wide && harness nvtx-gpu "$export" --mode thread
}

# captures_again: the self-test's program captured three times in a row, the third after every nsys process
# of this installation is ended and nsys's temporary files are removed; each export's kernels, CUDA API calls
# and NVTX ranges counted. On the H100 (docs/gpu.md) all three lost the same work with CUPTI 12.4 (no state
# left behind by an earlier capture) and none with CUPTI 13.0.
captures_again() {
  "$python" -c 'from harness.experiments.gpu_selftest import PROGRAM; print(PROGRAM)' >selftest_program.py
  local i
  for i in 1 2 3; do
    if ((i == 3)); then
      echo "before capture 3: ending nsys processes and removing its temporary files"
      pkill -f -- "^$nsys_root/" ; sleep 2
      rm -rf /tmp/nvidia /tmp/nsys-* /var/tmp/nsys-* /dev/shm/*[Nn][Ss]ys* /dev/shm/*Quad* 2>/dev/null
    fi
    echo "state before capture $i: processes: $(pgrep -af -- 'nsys|Qdstrm|quadd' | grep -v pgrep | cut -c1-160 | tr '\n' ';')"
    echo "  /tmp/nvidia: $(find /tmp/nvidia -maxdepth 3 2>/dev/null | head -20 | tr '\n' ' ')"
    echo "  /dev/shm: $(ls /dev/shm 2>/dev/null | head -20 | tr '\n' ' ')"
    harness profile --name "again$i" -- "$python" selftest_program.py >"again$i.out" 2>&1
    echo "capture $i: exit $?; $(tail -3 "again$i.out" | tr '\n' ' ' | cut -c1-300)"
    "$python" - "$(latest_export)" <<'EOF2'
import sqlite3, sys
def count(table):
    try:
        con = sqlite3.connect(f"file:{sys.argv[1]}?mode=ro", uri=True)
        return con.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
    except sqlite3.Error:
        return "no table"
print(f"  {sys.argv[1]}: kernels {count('CUPTI_ACTIVITY_KIND_KERNEL')}, "
      f"CUDA API calls {count('CUPTI_ACTIVITY_KIND_RUNTIME')}, NVTX {count('NVTX_EVENTS')}")
EOF2
  done
}

# generate_decode [nsys]: `run small --mode generate` on CUDA three ways: eager (a growing KV cache),
# --cuda-graphs (a static cache, one decode step captured and replayed per token) and --compile
# (reduce-overhead); each run's serving table (TTFT, TPOT p50/p90/p99, output tokens/s, KV cache). With
# "nsys": each under nsys, then its export's phases (prefill, decode) and its NVTX ranges by thread (the
# `token` ranges: the kernels each decoded token launched, or its graph replayed). Exit 1 if any failed.
generate_decode() {
  local under="${1:-}" rc=0 flags export
  local args=(small --device cuda --mode generate --steps 5 --warmup 2 --new-tokens 32 --wide)
  for flags in "" --cuda-graphs --compile; do
    if [[ -z "$under" ]]; then
      echo "\$ harness run ${args[*]} $flags"
      harness run "${args[@]}" $flags || { echo "(exit $?)"; rc=1; }
      continue
    fi
    echo "\$ harness run ${args[*]} $flags --nsys --no-nsys-baseline"
    harness run "${args[@]}" $flags --nsys --no-nsys-baseline || { echo "(exit $?)"; rc=1; continue; }
    export="$(latest_export)"
    # the export's own phases (prefill, decode: the ranges inside its `step`s), then each token's kernels
    echo "\$ harness nvtx-gpu $export --mode phase"
    harness nvtx-gpu "$export" --mode phase --wide || { echo "(exit $?)"; rc=1; }
    echo "\$ harness nvtx-gpu $export --mode thread"
    harness nvtx-gpu "$export" --mode thread --wide || { echo "(exit $?)"; rc=1; }
    # per range: NumGPUOps counts a graph replay once (nvtx_gpu_proj_trace), Replayed Kernels its kernels
    echo "\$ harness nvtx-gpu $export --projection --format csv"
    harness nvtx-gpu "$export" --projection --format csv || { echo "(exit $?)"; rc=1; }
    # trimmed as tests/data's captures are, ready to become a fixture (fixtures/ in OUT)
    local name="${flags#--}"
    mkdir -p fixtures
    "$python" "$root/scripts/trim_export.py" "$export" "fixtures/small-generate-${name:-eager}.sqlite.xz" ||
      { echo "(exit $?)"; rc=1; }
  done
  return $rc
}

# generate_overhead: nsys's overhead on generate, eager decode against --cuda-graphs decode (the harness's own
# `overhead`, runs with and without nsys alternating): per phase (prefill, decode, step) with its interval
generate_overhead() {
  local rc=0 flags args=(small --device cuda --mode generate --steps 3 --warmup 1 --new-tokens 32 --repeats 2 --wide)
  for flags in "" --cuda-graphs; do
    echo "\$ harness overhead ${args[*]} $flags"
    harness overhead "${args[@]}" $flags || { echo "(exit $?)"; rc=1; }
  done
  return $rc
}

# generate_torch: a generate run under torch.profiler (Kineto), eager and --cuda-graphs: the same phases and
# serving figures from the trace, decode's GPU-busy share among them
generate_torch() {
  local rc=0 flags args=(small --device cuda --mode generate --steps 3 --warmup 1 --new-tokens 32 --profiler torch --wide)
  for flags in "" --cuda-graphs; do
    echo "\$ harness run ${args[*]} $flags"
    harness run "${args[@]}" $flags || { echo "(exit $?)"; rc=1; }
  done
  return $rc
}

sweep_and_dashboard() {
  harness sweep --models tiny,small --batch-sizes 1,4 --device "$device" --steps 3 --warmup 1 &&
    harness dashboard --out dashboard.html
}

# planted CAUSE: `run --plant CAUSE --nsys` of PLANT_MODEL, its export's health and the run's findings
# (json: the rule that must come first is the catalogue's, workloads/plants/catalogue.py). The GPU causes run at
# bf16 (fp32-matmul sets fp32 itself), the CPU at fp32.
planted() {
  local cause="$1" precision=fp32 export
  [[ "$device" == cuda ]] && precision=bf16
  harness run "${PLANT_MODEL:-small}" --device "$device" --precision "$precision" --plant "$cause" --nsys \
    --no-nsys-baseline --steps 5 --warmup 3 --profile-dir "plants/$cause" || return
  export="$(ls -t plants/"$cause"/*.sqlite | head -1)"
  echo "export: $export"
  harness health "$export" --wide
  # the stored run, not its export alone: its record judges recompiles and the optimizer's memory roof
  harness advise latest --format json >"plants/$cause/advise.json"; cat "plants/$cause/advise.json"
}

# planted_program CAUSE: the same cause as a user's program under `harness profile`, and its findings
planted_program() {
  local cause="$1"
  harness profile --name "plant-$cause" --profile-dir "programs/$cause" -- \
    "$python" -m workloads.plants "$cause" --model "${PLANT_MODEL:-small}" --device "$device" || return
  harness advise "$(ls -t programs/"$cause"/*.sqlite | head -1)" --format json >"programs/$cause/advise.json"
  cat "programs/$cause/advise.json"
}

export -f harness latest_export tables graph_program captures_again generate_decode generate_overhead \
  generate_torch sweep_and_dashboard planted planted_program
say "gpu-check $(date -Is) in $out"
say "python: $python; HARNESS_NSYS=${HARNESS_NSYS:-(found by the harness)}"
step environment 30 -- bash -c "nvidia-smi || echo 'no nvidia-smi'; \"$python\" -c 'import torch; print(torch.__version__, torch.version.cuda, torch.cuda.is_available())'; \"\${HARNESS_NSYS:-nsys}\" --version"

# generate_steps: generate's decode paths, without nsys, then under it when there is one (CUDA only)
generate_steps() {
  if [[ "$device" != cuda ]]; then
    say "== generate decode: skipped (--cuda-graphs needs CUDA)"
    return
  fi
  step "generate: eager, --cuda-graphs, --compile" 150 -- generate_decode
  if [[ -n "$nsys_path" ]]; then
    step "generate under nsys: eager, --cuda-graphs, --compile" 240 capture -- generate_decode nsys
  else
    say "== generate under nsys: skipped (no nsys found)"
  fi
}

# generate_overhead_steps: nsys's overhead on eager and --cuda-graphs decode, both under torch.profiler
generate_overhead_steps() {
  if [[ "$device" != cuda ]]; then
    say "== generate overhead: skipped (--cuda-graphs needs CUDA)"
    return
  fi
  if [[ -n "$nsys_path" ]]; then
    step "generate overhead: eager, --cuda-graphs" 240 capture -- generate_overhead
  else
    say "== generate overhead: skipped (no nsys found)"
  fi
  step "generate under torch.profiler: eager, --cuda-graphs" 120 -- generate_torch
}
if [[ -n "$plants" ]]; then
  # the catalogue: every cause (a rehearsal on the CPU leaves out the GPU causes, which it refuses), then the
  # programs
  causes="${PLANT_CAUSES:-$("$python" -c 'import sys; from workloads.plants.catalogue import CAUSES, REFUSED
print(*(n for n, c in CAUSES.items() if sys.argv[1] == "cuda" or c.cpu != REFUSED))' "$device")}"
  say "causes: $causes"
  for cause in $causes; do
    step "plant $cause" 60 capture -- planted "$cause"
  done
  for cause in $causes; do
    step "program $cause" 45 capture -- planted_program "$cause"
  done
  say "files: $(cd "$out" && find plants programs -type f 2>/dev/null | sort | tr '\n' ' ')"
  if ((${#failed[@]})); then
    say "gpu-check --plants: $((SECONDS - started)) s; not passed: ${failed[*]}"
    exit 1
  fi
  say "gpu-check --plants: $((SECONDS - started)) s; every step passed"
  exit 0
fi
if [[ -n "$only" ]]; then
  if [[ "$only" == generate ]]; then generate_steps; else generate_overhead_steps; fi
  say "files: $(cd "$out" && find . -maxdepth 2 -type f ! -path './site/*' ! -path './cache/*' ! -path './nsys/*' | sort | tr '\n' ' ')"
  ((${#failed[@]})) && { say "gpu-check --only $only: $((SECONDS - started)) s; not passed: ${failed[*]}"; exit 1; }
  say "gpu-check --only $only: $((SECONDS - started)) s; every step passed"
  exit 0
fi
step doctor 90 capture -- harness doctor --wide
if [[ "$device" == cuda ]]; then
  step "run medium --nsys" 180 capture -- harness run medium --device cuda --nsys
else
  step "run tiny --nsys" 300 capture -- harness run tiny --device cpu --nsys --steps 2 --warmup 1
fi
step "tables of its export" 60 -- tables
if [[ "$device" == cuda ]]; then
  step "CUDA graph under nsys" 60 capture -- graph_program
  step "captures again" 120 capture -- captures_again
fi
step overhead 90 capture -- harness overhead tiny --device "$device" --repeats 2 --steps 3 --warmup 1
step "run --profiler torch" 90 -- harness run small --device "$device" --profiler torch --steps 3 --warmup 1
[[ "$device" == cuda ]] && step "run --memory" 60 -- harness run small --device cuda --memory --steps 3 --warmup 1
[[ "$device" == cuda ]] && step "run --power" 90 -- harness run small --device cuda --power --steps 5 --warmup 1
step "sweep and dashboard" 90 -- sweep_and_dashboard
generate_steps
generate_overhead_steps

say "files: $(cd "$out" && find . -maxdepth 2 -type f ! -path './site/*' ! -path './cache/*' ! -path './nsys/*' | sort | tr '\n' ' ')"
if ((${#failed[@]})); then
  say "gpu-check: $((SECONDS - started)) s; not passed: ${failed[*]}"
  exit 1
fi
say "gpu-check: $((SECONDS - started)) s; every step passed"
