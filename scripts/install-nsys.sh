#!/usr/bin/env bash
# Install a project-local Nsight Systems into .tools/nsys without NVIDIA driver packages and without touching
# the system's apt configuration. Does nothing when a usable nsys is already there.
#
# Which one: Debian's nsight-systems 2023.4.4 (trixie, non-free; made for CUDA 12.4, supports
# --python-backtrace). Debian 12's own 2022.4.2.1 (bookworm non-free, made for CUDA 11.8) recorded 0 kernels
# of a CUDA 13 program on an H100, so it is only the fallback where trixie cannot be had, and a project-local
# copy older than 2023.4 is replaced by it.
#
# CUPTI 13.0: nsys 2023.4 carries CUPTI libraries up to 12.4, and under a CUDA 13 program it lost the CUDA
# trace for a while after cuBLAS loaded, left most kernels unnamed and recorded nothing of CUDA graphs (an H100,
# docs/gpu.md). With NVIDIA's CUPTI 13.0 (PyPI: nvidia-cuda-cupti) beside its own as libcupti.so.13.0 it picks
# that one for a CUDA 13 driver and recorded every kernel, all named. So the project-local 2023.4 gets it
# (HARNESS_CUPTI_WHEEL: a wheel to take it from instead of PyPI; HARNESS_PIP_PYTHON: the python whose pip
# downloads it, default the project's .venv).
#
# How: the packages are fetched with a private apt state in a temporary folder (its own sources file, package
# lists and cache; apt-get -o Dir::...), from the machine's own Debian (or Ubuntu) archive as its sources
# name it. /etc/apt and the system's package lists are only read.
#
# Sourcing this file (`source scripts/install-nsys.sh`) only defines the functions. tests/test_install_nsys.py
# points them elsewhere: HARNESS_APT_DIR (default /etc/apt, the sources read), HARNESS_OS_RELEASE,
# HARNESS_DEBIAN_KEYRING, HARNESS_NSYS_ROOT (default .tools/nsys) and HARNESS_NSYS_SUITE (default trixie).
set -euo pipefail

APT_DIR="${HARNESS_APT_DIR:-/etc/apt}"
NEWER_SUITE="${HARNESS_NSYS_SUITE:-trixie}" # the Debian suite whose non-free holds nsight-systems 2023.4.4
WANTED="2023.4"                              # a project-local nsys older than this is replaced
CUPTI_SPEC="nvidia-cuda-cupti==13.0.85"      # CUPTI 13.0, for nsys releases made before CUDA 13 (2025.3)
OS_RELEASE="${HARNESS_OS_RELEASE:-/etc/os-release}"
DEBIAN_KEYRING="${HARNESS_DEBIAN_KEYRING:-/usr/share/keyrings/debian-archive-keyring.gpg}"
UBUNTU_KEYRING=/usr/share/keyrings/ubuntu-archive-keyring.gpg

# archive_uri SUITE DEFAULT: the URI of the first enabled `deb` source in $APT_DIR that serves SUITE (the
# machine's own mirror), else DEFAULT. Reads sources.list and sources.list.d/*.list (one-line format) and
# sources.list.d/*.sources (deb822); `deb-src`, commented and `Enabled: no` entries do not count.
archive_uri() {
  local suite="$1" default="$2" f found=""
  local -a lists=() stanzas=()
  [[ -f "$APT_DIR/sources.list" ]] && lists+=("$APT_DIR/sources.list")
  for f in "$APT_DIR"/sources.list.d/*.list; do [[ -f "$f" ]] && lists+=("$f"); done
  for f in "$APT_DIR"/sources.list.d/*.sources; do [[ -f "$f" ]] && stanzas+=("$f"); done
  if ((${#lists[@]})); then
    found="$(awk -v suite="$suite" '
      { sub(/#.*/, "") }
      $1 != "deb" { next }
      {
        i = 2
        if ($i ~ /^\[/) { while (i <= NF && $i !~ /\]$/) i++; i++ }  # [options]
        if ($(i + 1) == suite) { print $i; exit }
      }' "${lists[@]}")"
  fi
  if [[ -z "$found" ]] && ((${#stanzas[@]})); then
    # deb822: stanzas separated by blank lines; fields Types, URIs, Suites, Enabled
    found="$(awk -v suite="$suite" '
      function check() {
        if (!done && types ~ /(^| )deb( |$)/ && enabled != "no" && (" " suites " ") ~ (" " suite " ") && uris) {
          split(uris, u, " "); print u[1]; done = 1
        }
        types = suites = uris = ""; enabled = "yes"
      }
      FNR == 1 { check() }
      /^[ \t]*#/ { next }
      /^[ \t]*$/ { check(); next }
      {
        key = tolower($1); value = $0; sub(/^[^:]*:[ \t]*/, "", value); gsub(/[ \t]+/, " ", value)
        if (key == "types:") types = value
        else if (key == "uris:") uris = value
        else if (key == "suites:") suites = value
        else if (key == "enabled:") enabled = tolower(value)
      }
      END { check() }' "${stanzas[@]}")"
  fi
  echo "${found:-$default}"
}

# private_source ROOT URI SUITE COMPONENT KEYRING: the one sources file of a private apt state in ROOT
private_source() {
  mkdir -p "$1/sources.list.d" "$1/lists/partial" "$1/cache/archives/partial" "$1/prefs"
  printf 'Types: deb\nURIs: %s\nSuites: %s\nComponents: %s\nSigned-By: %s\n' "$2" "$3" "$4" "$5" \
    >"$1/sources.list.d/nsys.sources"
}

# private_apt ROOT ARGS...: apt-get with its sources, package lists, cache and preferences in ROOT only
private_apt() {
  local root="$1"
  shift
  apt-get -o Dir::Etc::SourceList=/dev/null -o Dir::Etc::SourceParts="$root/sources.list.d" \
    -o Dir::State::Lists="$root/lists" -o Dir::Cache="$root/cache" \
    -o Dir::Etc::Preferences=/dev/null -o Dir::Etc::PreferencesParts="$root/prefs" "$@"
}

# apt's words for an archive it could not reach (resolving, connecting, a timeout)
UNREACHABLE='Could not resolve|Temporary failure resolving|Could not connect|Unable to connect|Connection failed'
UNREACHABLE+='|Connection refused|timed out|Network is unreachable|No route to host'

# fetch ROOT URI SUITE COMPONENT KEYRING: download nsight-systems and nsight-systems-target from that one
# source into ROOT/debs; fails (quietly: apt_failure LOG says why) where the source or the packages cannot
# be had. apt-get update only warns of an archive it cannot reach; the download would then say "Unable to
# locate package", hiding why, so that is not tried
fetch() {
  local root="$1"
  rm -rf "$root"
  private_source "$root" "$2" "$3" "$4" "$5"
  mkdir -p "$root/debs"
  private_apt "$root" update -qq >"$root/apt.log" 2>&1 || return 1
  grep -qE "$UNREACHABLE" "$root/apt.log" && return 1
  (cd "$root/debs" && private_apt "$root" download -qq nsight-systems nsight-systems-target) \
    >>"$root/apt.log" 2>&1 || return 1
  compgen -G "$root/debs/nsight-systems-target_*.deb" >/dev/null
}

# apt_failure LOG URI: why a fetch failed, in one line: the archive could not be reached (and apt's line
# that says so), else apt's last line
apt_failure() {
  local reached
  reached="$(grep -E "$UNREACHABLE" "$1" 2>/dev/null | head -1 || true)"
  if [[ -n "$reached" ]]; then
    echo "$2 could not be reached (check the network, or apt's proxy): ${reached#"${reached%%[![:space:]]*}"}"
  else
    tail -1 "$1" 2>/dev/null || true
  fi
}

# unpack DEBS DEST: both packages into DEST, and the layout made whole: nsys looks for QdstrmImporter beside
# its target folder (without the link it leaves only a .qdstrm), wants libssh.so, and `nsys stats` imports
# nsysstats and gpustats from host-linux-x64/python/lib (the packages put them in python3's dist-packages)
unpack() {
  local debs="$1" dest="$2" deb host
  mkdir -p "$dest"
  for deb in "$debs"/*.deb; do dpkg -x "$deb" "$dest"; done
  mkdir -p "$dest/usr/lib/x86_64-linux-gnu/nsight-systems"
  ln -sfn ../../nsight-systems/host-linux-x64 "$dest/usr/lib/x86_64-linux-gnu/nsight-systems/host-linux-x64"
  host="$dest/usr/lib/nsight-systems/host-linux-x64"
  ln -sfn /usr/lib/x86_64-linux-gnu/libssh.so.4 "$host/libssh.so"
  if compgen -G "$dest/usr/lib/python3/dist-packages/*stats.py" >/dev/null; then
    mkdir -p "$host/python/lib"
    cp -n "$dest"/usr/lib/python3/dist-packages/{nsysstats,gpustats}.py "$host/python/lib/" 2>/dev/null || true
  fi
}

# nsys_version NSYS: "2023.4.4.54" of a runnable nsys, else nothing
nsys_version() {
  [[ -x "$1" ]] || return 0
  "$1" --version 2>/dev/null | grep -oE '[0-9]{4}\.[0-9]+(\.[0-9]+)*' | head -1 || true
}

# older VERSION THAN: is VERSION (2022.4.2.1) older than THAN (2023.4)?
older() {
  [[ "$1" != "$2" && "$(printf '%s\n%s\n' "$1" "$2" | sort -V | head -1)" == "$1" ]]
}

# add_cupti DEST: CUPTI 13.0 into the target folder of the nsys unpacked in DEST, as libcupti.so.13.0, where
# that nsys is 2023.4 or newer (2022.4 was not measured with it) and older than 2025.3 (made for CUDA 13); a
# warning, not a failure, where it cannot be had
add_cupti() {
  local dest="$1" version target py wheel tmp
  version="$(nsys_version "$dest/usr/lib/nsight-systems/bin/nsys")"
  target="$dest/usr/lib/x86_64-linux-gnu/nsight-systems/target-linux-x64"
  if [[ -z "$version" ]] || older "$version" "$WANTED" || ! older "$version" 2025.3 || [[ ! -d "$target" ]] ||
    compgen -G "$target/libcupti.so.13.*" >/dev/null; then
    return 0
  fi
  py="${HARNESS_PIP_PYTHON:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/.venv/bin/python}"
  [[ -x "$py" ]] || py=python3
  tmp="$(mktemp -d)"
  CUPTI_TMP="$tmp" CUPTI_OF="$version" CUPTI_PART="$target/libcupti.so.13.0.part"
  # Ctrl-C (or SIGTERM) while CUPTI is fetched: pip takes it as an error of its own and exits 1, which was
  # then only a warning; it is the user stopping the install, which ends here, saying what is missing
  trap 'cupti_stopped 130' INT
  trap 'cupti_stopped 143' TERM
  wheel="${HARNESS_CUPTI_WHEEL:-}"
  if [[ -z "$wheel" ]]; then
    if ! "$py" -m pip download -q --no-deps --only-binary=:all: -d "$tmp" "$CUPTI_SPEC" >"$tmp/pip.log" 2>&1; then
      grep -q 'Operation cancelled by user' "$tmp/pip.log" && cupti_stopped 130
      trap - INT TERM
      echo "nsys: warning: could not download CUPTI 13.0 ($CUPTI_SPEC): $(grep -v '^WARNING' "$tmp/pip.log" |
        tail -1); nsys $version traces CUDA 13 programs in part (harness doctor says so)"
      rm -rf "$tmp"
      return 0
    fi
    wheel="$(compgen -G "$tmp/*.whl" | head -1)"
  fi
  if ! "$py" - "$wheel" "$target/libcupti.so.13.0" 2>"$tmp/unzip.log" <<'EOF'; then
import os, shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as whl:
    name = next((n for n in whl.namelist() if n.endswith("/lib/libcupti.so.13")), None)
    if name is None:
        sys.exit("the wheel holds no lib/libcupti.so.13")
    with whl.open(name) as src, open(sys.argv[2] + ".part", "wb") as out:
        shutil.copyfileobj(src, out)
os.chmod(sys.argv[2] + ".part", 0o755)
os.replace(sys.argv[2] + ".part", sys.argv[2])
EOF
    trap - INT TERM
    echo "nsys: warning: no libcupti.so.13 taken from $wheel: $(tail -1 "$tmp/unzip.log")"
    rm -rf "$tmp"
    return 0
  fi
  trap - INT TERM
  rm -rf "$tmp"
  echo "nsys: added CUPTI 13.0 ($CUPTI_SPEC) to its target folder: nsys $version traces CUDA 13.0 with it"
}

# cupti_stopped CODE: the install was stopped while CUPTI 13.0 was fetched: say what is missing, and exit
# with CODE (130: Ctrl-C, 143: SIGTERM); the nsys itself is whole
cupti_stopped() {
  trap - INT TERM
  rm -rf "$CUPTI_TMP" "$CUPTI_PART"
  echo "nsys: interrupted: CUPTI 13.0 ($CUPTI_SPEC) is missing, so nsys $CUPTI_OF traces CUDA 13 programs" \
    "in part; run \`make setup\` again to add it" >&2
  exit "$1"
}

main() {
  local root dest nsys cand have got uri suite component keyring
  root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
  dest="${HARNESS_NSYS_ROOT:-$root/.tools/nsys}"
  nsys="$dest/usr/lib/nsight-systems/bin/nsys"

  have="$(nsys_version "$nsys")"
  if [[ -n "$have" ]] && ! older "$have" "$WANTED"; then
    echo "nsys: $nsys (project-local $have, already installed)"
    add_cupti "$dest"
    return 0
  fi
  if [[ -z "$have" ]]; then
    if [[ -n "${HARNESS_NSYS:-}" && -x "${HARNESS_NSYS}" ]]; then
      echo "nsys: $HARNESS_NSYS (HARNESS_NSYS, nothing installed)"
      return 0
    fi
    if command -v nsys >/dev/null 2>&1; then
      echo "nsys: $(command -v nsys) (on PATH, nothing installed)"
      return 0
    fi
    for cand in /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys; do
      if [[ -x "$cand" ]]; then
        echo "nsys: $cand (found, nothing installed)"
        return 0
      fi
    done
  fi

  if ! grep -qiE 'debian|ubuntu' "$OS_RELEASE" 2>/dev/null; then
    echo "nsys not found and this is not Debian/Ubuntu: install Nsight Systems from" \
      "https://developer.nvidia.com/nsight-systems and put nsys on PATH (or set HARNESS_NSYS)." >&2
    [[ -n "$have" ]] && return 0 || return 1
  fi
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "nsys not found and apt-get is not on PATH, which this Debian/Ubuntu fetches it with: put apt-get" \
      "on PATH (apt's own /usr/bin) and run \`make setup\` again, or install Nsight Systems from" \
      "https://developer.nvidia.com/nsight-systems and set HARNESS_NSYS." >&2
    [[ -n "$have" ]] && return 0 || return 1
  fi
  . "$OS_RELEASE"
  [[ -n "$have" ]] && echo "nsys: the project-local $have is older than $WANTED (it recorded no kernels of" \
    "a CUDA 13 program): replacing it"

  TMP="$(mktemp -d)"
  trap 'rm -rf "$TMP" "${DEST_NEW:-}"' EXIT
  local tmp="$TMP"
  got=""
  # 1. Debian's 2023.4.4 from trixie's non-free, through the machine's own Debian mirror
  if [[ -f "$DEBIAN_KEYRING" ]]; then
    uri="$(archive_uri "${VERSION_CODENAME:-}" http://deb.debian.org/debian)"
    [[ "${ID:-}" == "debian" ]] || uri=http://deb.debian.org/debian
    if fetch "$tmp/apt" "$uri" "$NEWER_SUITE" non-free "$DEBIAN_KEYRING"; then
      got="Debian $NEWER_SUITE non-free ($uri)"
    else
      echo "nsys: Debian $NEWER_SUITE non-free could not be had from $uri: $(apt_failure "$tmp/apt/apt.log" "$uri")"
    fi
  fi
  # 2. the fallback: this release's own suite (Debian non-free, Ubuntu multiverse)
  if [[ -z "$got" ]]; then
    suite="${VERSION_CODENAME:-}" component=non-free keyring="$DEBIAN_KEYRING"
    uri="$(archive_uri "$suite" http://deb.debian.org/debian)"
    if [[ "${ID:-}" != "debian" ]]; then
      component=multiverse keyring="$UBUNTU_KEYRING"
      uri="$(archive_uri "$suite" http://archive.ubuntu.com/ubuntu)"
    fi
    if fetch "$tmp/apt" "$uri" "$suite" "$component" "$keyring"; then
      got="$suite $component ($uri), the fallback"
    else
      echo "nsys: could not download nsight-systems from $uri $suite $component:" \
        "$(apt_failure "$tmp/apt/apt.log" "$uri")" >&2
      [[ -n "$have" ]] && echo "nsys: keeping the project-local $have" && return 0
      return 1
    fi
  fi

  # Runtime libraries nsys needs (installing nsight-systems itself would pull NVIDIA driver libraries)
  if ! dpkg -s libssh-4 libpfm4 >/dev/null 2>&1; then
    local sudo=""
    [[ $(id -u) -ne 0 ]] && sudo="sudo"
    $sudo apt-get install -y -qq libssh-4 libpfm4 >/dev/null
  fi

  # unpacked beside, then swapped in: an interrupted install leaves the old copy (or none), never half of one
  DEST_NEW="$dest.new"
  rm -rf "$dest.new"
  unpack "$tmp/apt/debs" "$dest.new"
  local version
  version="$(nsys_version "$dest.new/usr/lib/nsight-systems/bin/nsys")"
  if [[ -z "$version" ]]; then
    rm -rf "$dest.new"
    echo "nsys: the unpacked nsys does not run (missing libraries?)" >&2
    return 1
  fi
  rm -rf "$dest.old"
  [[ -e "$dest" ]] && mv "$dest" "$dest.old"
  mkdir -p "$(dirname "$dest")"
  mv "$dest.new" "$dest"
  DEST_NEW=""
  rm -rf "$dest.old"
  echo "nsys: installed Nsight Systems $version from $got"
  add_cupti "$dest"
  echo "nsys: $nsys (project-local)"
}

if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
  main "$@"
fi
