// Peer benchmark: BPE encoding throughput of OpenAI's tiktoken (npm
// package, JS/WASM bindings) under node. tiktoken's WASM build is
// single-threaded, so the figure is MB/s on one core.
//
// Usage:
//   node bench/peers/tiktoken_bench.mjs <tiktoken-package-path> <text-file> [repeats=5]
//        [encoding=gpt2|cl100k|llama3] [llama3 tokenizer.json=data/tokenizers/llama3/tokenizer.json]
// e.g. (scripts/setup.sh unpacks tiktoken@1.0.22 into data/npm)
//   node bench/peers/tiktoken_bench.mjs data/npm/tiktoken@1.0.22 data/corpora/moby-dick.txt 5 llama3
// llama3 is tiktoken loaded with Llama 3's ranks, pattern and special tokens
// (llama3_tiktoken.mjs), as Meta's reference tokenizer is.
//
// Reads the file as UTF-8, runs encode_ordinary (special tokens are plain
// text) once as a warm-up and then `repeats` timed times, and prints the
// median seconds, MB/s (file bytes / 1e6 / median seconds), the token count
// and a final JSON line:
//   {"peer":"tiktoken-node","version":"1.0.22","mb_per_s":...,"tokens":...,"bytes":...}
// Timing covers only encode_ordinary (including the JS<->WASM string copy),
// not reading the file or creating the encoder.

import fs from "node:fs";
import path from "node:path";
import { createRequire } from "node:module";

const [pkgArg, fileArg, repeatsArg, encodingArg = "gpt2", vocabArg] = process.argv.slice(2);
if (!pkgArg || !fileArg) {
  console.error("usage: node tiktoken_bench.mjs <tiktoken-package-path> <text-file> [repeats=5]");
  process.exit(2);
}
const repeats = repeatsArg === undefined ? 5 : Number(repeatsArg);
if (!Number.isInteger(repeats) || repeats < 1) {
  console.error(`repeats must be a positive integer, got ${repeatsArg}`);
  process.exit(2);
}

const pkgDir = path.resolve(pkgArg);
const pkgJson = JSON.parse(fs.readFileSync(path.join(pkgDir, "package.json"), "utf8"));
if (pkgJson.name !== "tiktoken") {
  console.error(`${pkgDir} is not the tiktoken package (name=${pkgJson.name})`);
  process.exit(2);
}
const require = createRequire(import.meta.url);
const tiktoken = require(pkgDir);

const buf = fs.readFileSync(fileArg);
const bytes = buf.length;
const text = new TextDecoder("utf-8", { fatal: true }).decode(buf); // throws on invalid UTF-8
if (text.charCodeAt(0) === 0xfeff) console.warn("note: file starts with a BOM; it is encoded as text");

let enc;
if (encodingArg === "gpt2" || encodingArg === "cl100k") {
  enc = tiktoken.get_encoding(encodingArg === "gpt2" ? "gpt2" : "cl100k_base");
} else if (encodingArg === "llama3") {
  const { llama3Encoding } = await import("./llama3_tiktoken.mjs");
  enc = llama3Encoding(tiktoken, vocabArg ?? "data/tokenizers/llama3/tokenizer.json");
} else {
  console.error(`encoding must be gpt2, cl100k or llama3, got ${encodingArg}`);
  process.exit(2);
}
let tokens = 0;
const times = [];
try {
  tokens = enc.encode_ordinary(text).length; // warm-up
  for (let i = 0; i < repeats; i++) {
    const t0 = process.hrtime.bigint();
    const ids = enc.encode_ordinary(text);
    const t1 = process.hrtime.bigint();
    times.push(Number(t1 - t0) / 1e9);
    if (ids.length !== tokens) throw new Error(`token count changed: ${ids.length} vs ${tokens}`);
  }
} finally {
  enc.free();
}

const sorted = [...times].sort((a, b) => a - b);
const mid = sorted.length >> 1;
const median = sorted.length % 2 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
const mbps = bytes / 1e6 / median;

console.log(`file: ${fileArg} (${bytes} bytes)`);
console.log(`tiktoken ${pkgJson.version} (node ${process.version}), ${encodingArg} encode_ordinary, 1 warm-up + ${repeats} runs`);
console.log(`runs (s): ${times.map((t) => t.toFixed(4)).join(" ")}`);
console.log(`median: ${median.toFixed(4)} s, ${mbps.toFixed(3)} MB/s, ${tokens} tokens` +
  ` (min ${sorted[0].toFixed(4)} s = ${(bytes / 1e6 / sorted[0]).toFixed(3)} MB/s)`);
console.log(JSON.stringify({
  peer: "tiktoken-node",
  version: pkgJson.version,
  encoding: encodingArg,
  mb_per_s: Number(mbps.toFixed(3)),
  tokens,
  bytes,
}));
