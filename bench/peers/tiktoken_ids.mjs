// Token ids of a file from OpenAI's tiktoken (npm, WASM), one line of space-separated ids, as
// `kiln tokenize` prints them: the independent reference for tests/data/tokenizer_vs_tiktoken.sh.
//
//   node bench/peers/tiktoken_ids.mjs <tiktoken-package-path> <gpt2|cl100k|llama3> <file>
//        [llama3 tokenizer.json=data/tokenizers/llama3/tokenizer.json]
// Special-token text is ordinary text (encode_ordinary). The file must be UTF-8.

import fs from "node:fs";
import { loadTiktoken, llama3Encoding } from "./llama3_tiktoken.mjs";

const [pkgArg, encodingArg, fileArg, vocabArg] = process.argv.slice(2);
if (!pkgArg || !encodingArg || !fileArg) {
  console.error("usage: node tiktoken_ids.mjs <tiktoken-package-path> <gpt2|cl100k|llama3> <file>");
  process.exit(2);
}
const { tiktoken } = loadTiktoken(pkgArg);
const enc =
  encodingArg === "llama3"
    ? llama3Encoding(tiktoken, vocabArg ?? "data/tokenizers/llama3/tokenizer.json")
    : tiktoken.get_encoding(encodingArg === "cl100k" ? "cl100k_base" : encodingArg);
const text = new TextDecoder("utf-8", { fatal: true }).decode(fs.readFileSync(fileArg));
const ids = enc.encode_ordinary(text);
enc.free();
process.stdout.write(Array.from(ids).join(" ") + "\n");
