#!/usr/bin/env bash
# Print the `nsys stats` oracles of every shared export with one nsys, as tests/oracles/nsys-<version>/.
#
#   tests/oracles/make_nsys_oracles.sh NSYS [SHARED]      (SHARED: ../shared/fixtures/nsys by default)
#   ONLY="tests/data/h100/tiny-generate.sqlite.xz" tests/oracles/make_nsys_oracles.sh NSYS   (some alone)
#
# The shared corpus's exports, then the project's own captures (tests/data/h100/*.sqlite.xz, decompressed:
# their oracles are h100/<name>/).
# Each export is copied to a scratch folder first (nsys stats may write beside the file it reads; the shared
# corpus is read-only). Per report: `nsys stats -r REPORT -f csv -o - report.sqlite`, the `Processing [...]`
# line and blank lines removed, kept as REPORT.csv (REPORT.csv.gz over 100 kB); a report nsys skipped or refused is one line of
# SKIPPED.txt with nsys's own words.
set -euo pipefail

nsys="${1:?usage: make_nsys_oracles.sh NSYS [SHARED]}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
shared="${2:-$here/../../../shared/fixtures/nsys}"
version="$("$nsys" --version | grep -oE '[0-9]{4}\.[0-9]+' | head -1)"
out="$here/nsys-$version"
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT

# The reports the project's tables mirror, by the names nsys 2023.x gives them (`nsys stats --help-reports`);
# REPORT:ARG is written REPORT_ARG.csv
reports=(
  cuda_gpu_kern_sum cuda_gpu_kern_sum:base cuda_gpu_kern_sum:mangled cuda_gpu_kern_gb_sum
  cuda_api_sum cuda_gpu_mem_time_sum cuda_gpu_mem_size_sum cuda_kern_exec_sum
  nvtx_sum nvtx_pushpop_sum nvtx_pushpop_trace nvtx_kern_sum nvtx_gpu_proj_trace nvtx_gpu_proj_sum osrt_sum
)

# the project's own captures (tests/data/h100/*.sqlite.xz) as h100/<name>, after the shared corpus's
exports=("$shared"/*/report.sqlite "$shared"/ext/*/report.sqlite "$here"/../data/h100/*.sqlite.xz)
[[ -z "${ONLY:-}" ]] || exports=($ONLY)  # ONLY="path …": these exports alone
for export in "${exports[@]}"; do
  if [[ "$export" == *.sqlite.xz ]]; then
    fixture="h100/$(basename "$export" .sqlite.xz)"
  else
    fixture="${export#"$shared"/}"
    fixture="${fixture%/report.sqlite}"
  fi
  mkdir -p "$scratch/$fixture" "$out/$fixture"
  if [[ "$export" == *.xz ]]; then
    xz -dc "$export" >"$scratch/$fixture/report.sqlite"
  else
    cp "$export" "$scratch/$fixture/report.sqlite"
  fi
  chmod u+w "$scratch/$fixture/report.sqlite"
  : >"$out/$fixture/SKIPPED.txt"
  for report in "${reports[@]}"; do
    text="$(cd "$scratch/$fixture" && "$nsys" stats -r "$report" -f csv -o - report.sqlite 2>&1 |
      grep -v '^Processing \[' | grep -v '^[[:space:]]*$' || true)"
    first="$(head -1 <<<"$text")"
    csv="$out/$fixture/${report//:/_}.csv"
    rm -f "$csv" "$csv.gz"
    if [[ -z "$text" ]]; then
      echo "$report: ran, and returned no rows" >>"$out/$fixture/SKIPPED.txt"
    elif [[ "$first" == *,* && "$first" != *SKIPPED* && "$first" != *ERROR* ]]; then
      printf '%s\n' "$text" >"$csv"
      # the large ones (torchrun_2gpu's NVTX tables: 19,118 ranges) compressed: pandas reads them as they are
      if (($(wc -c <"$csv") > 100000)); then gzip -n -9 "$csv"; fi
    else
      printf '%s: %s\n' "$report" "$(tr '\n' ' ' <<<"$text" | sed 's/ *$//')" >>"$out/$fixture/SKIPPED.txt"
    fi
  done
  [[ -s "$out/$fixture/SKIPPED.txt" ]] || rm "$out/$fixture/SKIPPED.txt"
  echo "$fixture: $(ls "$out/$fixture" | grep -cE '\.csv(\.gz)?$') reports"
done
