#!/usr/bin/env bash
# Installs kiln's dependencies (Debian packages only), builds kiln, and prepares the small sample
# dataset the tiny and small configs train on. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(
  build-essential cmake ninja-build pkg-config
  libdnnl-dev             # oneDNN: matrix products
  nlohmann-json3-dev      # JSON: metrics, checkpoints, safetensors headers
  libcli11-dev            # command line
  libtomlplusplus-dev     # TOML configs
  libfmt-dev              # formatting
  libgtest-dev libgmock-dev  # tests
  clang-format
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  echo "setup: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build build

# Sample data: the license texts every Debian system ships, as byte-level tokens.
if [ ! -f data/licenses/manifest.json ]; then
  ./build/kiln data prepare --tokenizer bytes --input /usr/share/common-licenses --output data/licenses
fi
echo "setup: done. Try: ./build/kiln train configs/tiny.toml"
