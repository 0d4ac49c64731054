#!/usr/bin/env bash
# Install a project-local Nsight Systems (Debian's 2022.4.2.1 from non-free) into .tools/nsys
# without pulling NVIDIA driver packages. Does nothing if nsys is already usable.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEST="${HARNESS_NSYS_ROOT:-$ROOT/.tools/nsys}"
NSYS="$DEST/usr/lib/nsight-systems/bin/nsys"

if [[ -x "$NSYS" ]]; then echo "nsys: $NSYS (project-local, already installed)"; exit 0; fi
if [[ -n "${HARNESS_NSYS:-}" && -x "${HARNESS_NSYS}" ]]; then echo "nsys: $HARNESS_NSYS (HARNESS_NSYS)"; exit 0; fi
if command -v nsys >/dev/null 2>&1; then echo "nsys: $(command -v nsys) (on PATH, nothing installed)"; exit 0; fi
for cand in /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys; do
  if [[ -x "$cand" ]]; then echo "nsys: $cand (found, nothing installed)"; exit 0; fi
done

if ! command -v apt-get >/dev/null 2>&1 || ! grep -qiE 'debian|ubuntu' /etc/os-release; then
  echo "nsys not found and this is not Debian/Ubuntu: install Nsight Systems from" \
       "https://developer.nvidia.com/nsight-systems and put nsys on PATH (or set HARNESS_NSYS)." >&2
  exit 1
fi

SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi

# Debian's nsight-systems lives in non-free; add it in a separate sources file if missing.
if ! apt-cache policy nsight-systems-target 2>/dev/null | grep -q 'Candidate: [0-9]'; then
  . /etc/os-release
  if [[ "${ID:-}" == "debian" ]]; then
    # Same Signed-By as Debian's own sources, else apt refuses the conflicting entries.
    printf 'Types: deb\nURIs: http://deb.debian.org/debian\nSuites: %s\nComponents: non-free\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
      "${VERSION_CODENAME}" | $SUDO tee /etc/apt/sources.list.d/harness-nonfree.sources >/dev/null
  else
    $SUDO add-apt-repository -y multiverse
  fi
  $SUDO apt-get update -qq
fi
# Runtime libraries nsys needs; installing nsight-systems itself would pull NVIDIA driver libs.
$SUDO apt-get install -y -qq libssh-4 libpfm4 >/dev/null

TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
(cd "$TMP" && apt-get download -qq nsight-systems nsight-systems-target)
mkdir -p "$DEST"
for deb in "$TMP"/*.deb; do dpkg -x "$deb" "$DEST"; done

# Make the layout whole: nsys looks for QdstrmImporter beside its target dir, and wants libssh.so.
ln -sfn ../../nsight-systems/host-linux-x64 "$DEST/usr/lib/x86_64-linux-gnu/nsight-systems/host-linux-x64"
ln -sfn /usr/lib/x86_64-linux-gnu/libssh.so.4 "$DEST/usr/lib/nsight-systems/host-linux-x64/libssh.so"

"$NSYS" --version
echo "nsys: $NSYS (project-local)"
