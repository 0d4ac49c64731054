#!/usr/bin/env bash
# Install a project-local Nsight Systems (Debian's 2022.4.2.1 from non-free) into .tools/nsys
# without pulling NVIDIA driver packages. Does nothing if nsys is already usable.
#
# apt is left as it was found: the non-free (Ubuntu: multiverse) component is added only when no source
# enables it yet, and what was added is removed again once the packages are downloaded.
# Sourcing this file (`source scripts/install-nsys.sh`) only defines the functions; HARNESS_APT_DIR
# (default /etc/apt) points them at another tree of sources files, as the tests do.
set -euo pipefail

APT_DIR="${HARNESS_APT_DIR:-/etc/apt}"
ADDED_SOURCES="harness-nonfree.sources"
SUDO=""

# component_enabled COMPONENT SUITE: does an enabled `deb` source in $APT_DIR give COMPONENT for SUITE?
# Reads sources.list and sources.list.d/*.list (one-line format) and sources.list.d/*.sources (deb822).
component_enabled() {
  local component="$1" suite="$2" f
  local -a lists=() stanzas=()
  [[ -f "$APT_DIR/sources.list" ]] && lists+=("$APT_DIR/sources.list")
  for f in "$APT_DIR"/sources.list.d/*.list; do [[ -f "$f" ]] && lists+=("$f"); done
  for f in "$APT_DIR"/sources.list.d/*.sources; do [[ -f "$f" ]] && stanzas+=("$f"); done
  if ((${#lists[@]})) && awk -v comp="$component" -v suite="$suite" '
      { sub(/#.*/, "") }
      $1 != "deb" { next }
      {
        i = 2
        if ($i ~ /^\[/) { while (i <= NF && $i !~ /\]$/) i++; i++ }  # [options]
        if ($(i + 1) != suite) next
        for (j = i + 2; j <= NF; j++) if ($j == comp) found = 1
      }
      END { exit found ? 0 : 1 }' "${lists[@]}"; then
    return 0
  fi
  ((${#stanzas[@]})) || return 1
  # deb822: stanzas separated by blank lines; fields Types, Suites, Components, Enabled
  awk -v comp="$component" -v suite="$suite" '
    function check() {
      if (types ~ /(^| )deb( |$)/ && enabled != "no" && (" " suites " ") ~ (" " suite " ") \
          && (" " comps " ") ~ (" " comp " ")) found = 1
      types = suites = comps = ""; enabled = "yes"
    }
    FNR == 1 { check() }
    /^[ \t]*#/ { next }
    /^[ \t]*$/ { check(); next }
    {
      key = tolower($1); value = $0; sub(/^[^:]*:[ \t]*/, "", value); gsub(/[ \t]+/, " ", value)
      if (key == "types:") types = value
      else if (key == "suites:") suites = value
      else if (key == "components:") comps = value
      else if (key == "enabled:") enabled = tolower(value)
    }
    END { check(); exit found ? 0 : 1 }' "${stanzas[@]}"
}

# add_debian_component COMPONENT SUITE: a sources file of our own for it, with the same Signed-By as
# Debian's own entries (apt refuses conflicting ones). Prints its path.
add_debian_component() {
  local file="$APT_DIR/sources.list.d/$ADDED_SOURCES"
  printf 'Types: deb\nURIs: http://deb.debian.org/debian\nSuites: %s\nComponents: %s\nSigned-By: %s\n' \
    "$2" "$1" /usr/share/keyrings/debian-archive-keyring.gpg | $SUDO tee "$file" >/dev/null
  echo "$file"
}

# remove_added WHAT: take back what add_debian_component (a file) or add-apt-repository (multiverse) added.
remove_added() {
  case "$1" in
    "") ;;
    multiverse) $SUDO add-apt-repository -y --remove multiverse ;;
    *) $SUDO rm -f "$1" ;;
  esac
}

# Once the packages are downloaded (or on a failure before): what was added to apt goes, and with it the
# package lists it brought.
take_back() {
  if [[ -n "${ADDED:-}" ]]; then
    remove_added "$ADDED" && $SUDO apt-get update -qq || true
    ADDED=""
  fi
}

cleanup() {
  if [[ -n "${TMP:-}" ]]; then rm -rf "$TMP"; fi
  take_back
}

main() {
  local root dest nsys cand
  root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
  dest="${HARNESS_NSYS_ROOT:-$root/.tools/nsys}"
  nsys="$dest/usr/lib/nsight-systems/bin/nsys"

  if [[ -x "$nsys" ]]; then echo "nsys: $nsys (project-local, already installed)"; return 0; fi
  if [[ -n "${HARNESS_NSYS:-}" && -x "${HARNESS_NSYS}" ]]; then echo "nsys: $HARNESS_NSYS (HARNESS_NSYS)"; return 0; fi
  if command -v nsys >/dev/null 2>&1; then echo "nsys: $(command -v nsys) (on PATH, nothing installed)"; return 0; fi
  for cand in /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys; do
    if [[ -x "$cand" ]]; then echo "nsys: $cand (found, nothing installed)"; return 0; fi
  done

  if ! command -v apt-get >/dev/null 2>&1 || ! grep -qiE 'debian|ubuntu' /etc/os-release; then
    echo "nsys not found and this is not Debian/Ubuntu: install Nsight Systems from" \
         "https://developer.nvidia.com/nsight-systems and put nsys on PATH (or set HARNESS_NSYS)." >&2
    return 1
  fi

  if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi

  # Debian's nsight-systems lives in non-free (Ubuntu: multiverse). Add the component only when no source
  # enables it; a component that is there but not yet fetched only needs `apt-get update`.
  ADDED="" TMP=""
  trap cleanup EXIT
  . /etc/os-release
  if ! apt-cache policy nsight-systems-target 2>/dev/null | grep -q 'Candidate: [0-9]'; then
    local component=non-free
    [[ "${ID:-}" == "debian" ]] || component=multiverse
    if ! component_enabled "$component" "${VERSION_CODENAME}"; then
      if [[ "${ID:-}" == "debian" ]]; then
        ADDED="$(add_debian_component non-free "${VERSION_CODENAME}")"
      else
        $SUDO add-apt-repository -y multiverse
        ADDED="multiverse"
      fi
      echo "added $ADDED for nsight-systems; it is removed again once the packages are downloaded"
    fi
    $SUDO apt-get update -qq
  fi
  # Runtime libraries nsys needs; installing nsight-systems itself would pull NVIDIA driver libs.
  $SUDO apt-get install -y -qq libssh-4 libpfm4 >/dev/null

  TMP="$(mktemp -d)"
  (cd "$TMP" && apt-get download -qq nsight-systems nsight-systems-target)
  take_back
  mkdir -p "$dest"
  for deb in "$TMP"/*.deb; do dpkg -x "$deb" "$dest"; done

  # Make the layout whole: nsys looks for QdstrmImporter beside its target dir, and wants libssh.so.
  ln -sfn ../../nsight-systems/host-linux-x64 "$dest/usr/lib/x86_64-linux-gnu/nsight-systems/host-linux-x64"
  ln -sfn /usr/lib/x86_64-linux-gnu/libssh.so.4 "$dest/usr/lib/nsight-systems/host-linux-x64/libssh.so"

  "$nsys" --version
  echo "nsys: $nsys (project-local)"
}

if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
  main "$@"
fi
