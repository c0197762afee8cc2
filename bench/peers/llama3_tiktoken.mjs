// Llama 3's tokenizer in OpenAI's tiktoken (npm package, its Rust encoder compiled to WASM):
// the independent implementation kiln's `llama3` tokenizer is checked and timed against.
//
// Meta's reference tokenizer (llama3/tokenizer.py) is tiktoken with 128,000 ranks, this
// pre-tokenizer pattern and 256 special tokens at 128000..128255. The ranks are read from the
// Hugging Face tokenizer.json that scripts/setup.sh installs (data/tokenizers/llama3): each
// vocabulary key is GPT-2's byte-level string (one character per byte), its id is its rank.
// The conversion is written here from GPT-2's bytes_to_unicode, not shared with kiln's loader.

import fs from "node:fs";
import path from "node:path";
import { createRequire } from "node:module";

export const LLAMA3_PATTERN =
  "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

function unicodeToByte() {
  const bs = [];
  for (let b = 0x21; b <= 0x7e; b++) bs.push(b);
  for (let b = 0xa1; b <= 0xac; b++) bs.push(b);
  for (let b = 0xae; b <= 0xff; b++) bs.push(b);
  const map = new Map();
  for (const b of bs) map.set(b, b);
  let n = 0;
  for (let b = 0; b < 256; b++)
    if (!bs.includes(b)) map.set(256 + n++, b);
  return map; // code point -> byte
}

// Returns {tiktoken, pkgVersion}: tiktoken = the package's module, loaded from its directory.
export function loadTiktoken(pkgArg) {
  const pkgDir = path.resolve(pkgArg);
  const pkgJson = JSON.parse(fs.readFileSync(path.join(pkgDir, "package.json"), "utf8"));
  if (pkgJson.name !== "tiktoken") throw new Error(`${pkgDir} is not the tiktoken package (name=${pkgJson.name})`);
  const require = createRequire(import.meta.url);
  return { tiktoken: require(pkgDir), version: pkgJson.version };
}

// A tiktoken Encoding for Llama 3 from tokenizer.json (the caller frees it).
export function llama3Encoding(tiktoken, tokenizerJsonPath) {
  const tj = JSON.parse(fs.readFileSync(tokenizerJsonPath, "utf8"));
  const pattern = tj.pre_tokenizer.pretokenizers[0].pattern.Regex;
  if (pattern !== LLAMA3_PATTERN) throw new Error(`unexpected pre-tokenizer pattern ${pattern}`);
  const u2b = unicodeToByte();
  const lines = [];
  for (const [key, rank] of Object.entries(tj.model.vocab)) {
    const bytes = [];
    for (const ch of key) {
      const b = u2b.get(ch.codePointAt(0));
      if (b === undefined) throw new Error(`token ${key} has a character outside the byte map`);
      bytes.push(b);
    }
    lines.push(`${Buffer.from(bytes).toString("base64")} ${rank}`);
  }
  if (lines.length !== 128000) throw new Error(`expected 128000 ranks, got ${lines.length}`);
  const special = {};
  for (const t of tj.added_tokens) special[t.content] = t.id;
  return new tiktoken.Tiktoken(lines.join("\n"), special, pattern);
}
