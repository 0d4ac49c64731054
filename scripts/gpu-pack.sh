#!/usr/bin/env bash
# What scripts/gpu-check.sh needs on a GPU machine that cannot install anything, packed on one that can:
#
#   scripts/gpu-pack.sh OUT [NSYS_ROOT]
#
# OUT/nsys-<version>.tar.xz  the unpacked nsys (NSYS_ROOT, default .tools/nsys as `make setup` leaves it)
#                            without its GUI: the target folder less the CUPTIs older than 12.x and the MPI
#                            injections; from host-linux-x64 only QdstrmImporter and the libraries it loads,
#                            Plugins/QuadDPlugin, libarrow, libparquet, and the system's libssh and libpfm it
#                            links to (the GPU machine may lack them).
# OUT/wheels/                the dependencies of the harness a PyTorch image usually lacks (the lent H100's
#                            image lacks these nine; HARNESS_PACK_WHEELS names others), as wheels for the
#                            GPU machine's Python (HARNESS_PACK_PYTHON, default 3.12, manylinux x86-64), without
#                            their own dependencies (that image has them).
# HARNESS_PACK_SLIM=1        also leaves out what CUDA tracing does not use: CollectX (network metrics) and
#                            libnvperf_grfx_host.so (graphics metrics), about 40 MB unpacked.
set -euo pipefail

out="${1:?usage: gpu-pack.sh OUT [NSYS_ROOT]}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
src="${2:-$root/.tools/nsys}"
python="${PYTHON:-$root/.venv/bin/python}"
wheels="${HARNESS_PACK_WHEELS:-sqlalchemy alembic mako plotly nvtx==0.2.11 msgspec isal platformdirs typer<0.29}"
pyver="${HARNESS_PACK_PYTHON:-3.12}"

nsys="$src/usr/lib/nsight-systems/bin/nsys"
[[ -x "$nsys" ]] || { echo "no nsys under $src (usr/lib/nsight-systems/bin/nsys)" >&2; exit 1; }
version="$("$nsys" --version | grep -oE '[0-9]{4}\.[0-9]+(\.[0-9]+)*' | head -1)"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT

# --- nsys without its GUI ------------------------------------------------------------------------------
tree="$stage/nsys"
mkdir -p "$tree/usr/lib/nsight-systems" "$tree/usr/lib/x86_64-linux-gnu/nsight-systems"
cp -a "$src/usr/lib/nsight-systems/bin" "$src/usr/lib/nsight-systems/target-linux-x64" \
  "$tree/usr/lib/nsight-systems/"
target="$tree/usr/lib/x86_64-linux-gnu/nsight-systems/target-linux-x64"
cp -a "$src/usr/lib/x86_64-linux-gnu/nsight-systems/target-linux-x64" "$target"
# the newest CUPTI of each CUDA major from 12 on: 12.4 for CUDA 12 machines, the 13.0 `make setup` adds for CUDA 13
keep="$(ls "$target" | grep -E '^libcupti\.so\.(1[2-9]|[2-9][0-9])\.[0-9]+$' | sort -V |
  awk -F. '{newest[$3] = $0} END {for (m in newest) print newest[m]}')"
for f in "$target"/libcupti.so.*; do grep -qxF "$(basename "$f")" <<<"$keep" || rm -f "$f"; done
rm -f "$target"/libToolsInjection{MPICH,OpenMPI,OpenSHMEM,UCP}64.so
[[ "${HARNESS_PACK_SLIM:-}" == 1 ]] && rm -rf "$target/CollectX" "$target/libnvperf_grfx_host.so"
ln -sfn ../../nsight-systems/host-linux-x64 "$tree/usr/lib/x86_64-linux-gnu/nsight-systems/host-linux-x64"

from="$src/usr/lib/nsight-systems/host-linux-x64"
host="$tree/usr/lib/nsight-systems/host-linux-x64"
mkdir -p "$host/Plugins"
cp -a "$from/QdstrmImporter" "$host/"
cp -a "$from/Plugins/QuadDPlugin" "$host/Plugins/"
cp -a "$from"/libarrow.so* "$from"/libparquet.so* "$host/"
# the libraries QdstrmImporter loads from its folder; those of the system it needs copied as files
while read -r lib path; do
  case "$path" in
    "$from"/*) cp -a "$from/$lib"* "$host/" 2>/dev/null || cp -aL "$path" "$host/$lib" ;;
  esac
done < <(cd "$from" && LD_LIBRARY_PATH="$from" ldd ./QdstrmImporter | awk '$3 ~ /^\// {print $1, $3}' |
  sed "s#$from/\./#$from/#")
rm -f "$host/libssh.so"
cp -L /usr/lib/x86_64-linux-gnu/libssh.so.4 "$host/libssh.so"
cp -L /usr/lib/x86_64-linux-gnu/libpfm.so.4 "$host/libpfm.so.4"
XZ_OPT="${XZ_OPT:--T0}" tar -C "$tree" -cJf "$out/nsys-$version.tar.xz" usr
echo "nsys $version: $out/nsys-$version.tar.xz ($(du -m "$out/nsys-$version.tar.xz" | cut -f1) MB)"

# --- wheels ----------------------------------------------------------------------------------------------
mkdir -p "$out/wheels"
platforms=()
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 \
  manylinux1_x86_64; do platforms+=(--platform "$p"); done
# shellcheck disable=SC2086
"$python" -m pip download -q --no-deps --only-binary=:all: --python-version "$pyver" --implementation cp \
  "${platforms[@]}" --dest "$out/wheels" $wheels
echo "wheels: $out/wheels ($(ls "$out/wheels" | wc -l) files, $(du -sm "$out/wheels" | cut -f1) MB)"
