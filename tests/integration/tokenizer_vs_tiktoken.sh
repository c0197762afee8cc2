#!/usr/bin/env bash
# kiln's gpt2, llama3 and cl100k tokenizers against OpenAI's tiktoken (npm tiktoken@1.0.22, its
# Rust encoder as WASM; Llama 3 as tiktoken with Llama 3's ranks, pattern and special tokens) on
# a varied corpus: Moby Dick, the King James Bible, 233 State of the Union addresses, the licence
# texts Debian ships, kiln's own C++ sources, and the tokenizer fixtures' texts (scripts,
# emoji, whitespace runs). Every id must match, and decoding must give the bytes back.
#
#   tests/integration/tokenizer_vs_tiktoken.sh KILN_BINARY SOURCE_DIR
# Exits 77 (skipped) only when node is not installed; scripts/setup.sh provides the rest.
set -euo pipefail
kiln=$1 src=$2
command -v node > /dev/null || { echo "node not installed: skipped"; exit 77; }
cd "$src"
pkg=data/npm/tiktoken@1.0.22
for f in "$pkg/package.json" data/tokenizers/llama3/tokenizer.json data/corpora/moby-dick.txt; do
  [ -f "$f" ] || { echo "missing $f: run ./scripts/setup.sh" >&2; exit 1; }
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

mkdir -p "$tmp/corpus"
cp data/corpora/moby-dick.txt "$tmp/corpus/moby-dick.txt"
[ -s data/corpora/kjv.txt ] && cp data/corpora/kjv.txt "$tmp/corpus/kjv.txt"
cat data/corpora/sotu/*.txt > "$tmp/corpus/sotu.txt"
cat /usr/share/common-licenses/* > "$tmp/corpus/licenses.txt" 2> /dev/null || true
cat src/*/*.cpp src/*/*.h > "$tmp/corpus/kiln-sources.txt"
node -e '
  const fs = require("fs");
  let out = "";
  for (const f of process.argv.slice(2)) for (const e of JSON.parse(fs.readFileSync(f, "utf8"))) out += e.text + "\n";
  fs.writeFileSync(process.argv[1], out.repeat(20));
' "$tmp/corpus/fixture-texts.txt" tests/fixtures/tokenizer/texts.json tests/fixtures/tokenizer/llama3_texts.json

export KILN_TOKENIZER_DIR="$src/data/tokenizers"
failed=0
for tok in llama3 cl100k gpt2; do
  for f in "$tmp"/corpus/*.txt; do
    name=$(basename "$f")
    node bench/peers/tiktoken_ids.mjs "$pkg" "$tok" "$f" > "$tmp/want"
    "$kiln" tokenize --tokenizer "$tok" < "$f" > "$tmp/got"
    if cmp -s "$tmp/want" "$tmp/got"; then
      "$kiln" tokenize --tokenizer "$tok" --decode < "$tmp/got" > "$tmp/back"
      if cmp -s "$tmp/back" "$f"; then
        echo "ok   $tok $name: $(wc -w < "$tmp/got") ids equal tiktoken's; decode gives the bytes back"
      else
        echo "FAIL $tok $name: decoding does not give the text back"
        failed=1
      fi
    else
      first=$(cmp <(tr ' ' '\n' < "$tmp/want") <(tr ' ' '\n' < "$tmp/got") | head -1 || true)
      echo "FAIL $tok $name: ids differ from tiktoken's ($first)"
      failed=1
    fi
  done
done
exit $failed
