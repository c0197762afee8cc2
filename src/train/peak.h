// The matmul peak MFU is measured against (GFLOP/s of one process), and where it comes from. In
// order: hardware.peak_gflops from the config; else what `kiln bench peak` measured on this CPU
// model with this many threads in this dtype, cached per machine; else a probe at start-up, the
// best of several short rounds. A probe on a busy machine reads low (26-214 GFLOP/s were seen on
// one machine), so the trainer also raises the peak to any rate a step achieves: MFU never reads
// above 100%.
#pragma once
#include <optional>
#include <string>
#include <vector>

namespace kiln {

// One measurement of `kiln bench peak`: the cache's key is (cpu, threads, dtype).
struct PeakEntry {
  std::string cpu;    // /proc/cpuinfo's "model name"
  int threads = 0;    // kernel threads of the process
  std::string dtype;  // "fp32" or "bf16" (bf16 operands, fp32 accumulation)
  double gflops = 0;
  std::string date;  // YYYY-MM-DD, local time, when it was measured
};

// $KILN_CACHE_DIR/peak.json if set, else $XDG_CACHE_HOME/kiln/peak.json, else
// $HOME/.cache/kiln/peak.json; "" when none of them is set.
std::string peak_cache_path();
// This machine's CPU model ("model name" in /proc/cpuinfo; "unknown CPU" when it names none).
std::string cpu_model_name();
// Today's local date, YYYY-MM-DD.
std::string local_date();

// The entries of a cache file. A missing file has none; a file that is not a cache kiln wrote
// (corrupt, truncated, another format) has none too, and *note says why it was ignored.
std::vector<PeakEntry> read_peak_cache(const std::string& path, std::string* note);
// Adds e to the cache at path, replacing an entry with the same key, written atomically (creates
// the directory). A corrupt file is replaced, and *note says so.
void store_peak(const std::string& path, const PeakEntry& e, std::string* note);
std::optional<PeakEntry> find_peak(const std::vector<PeakEntry>& entries, const std::string& cpu,
                                   int threads, const std::string& dtype);

struct Peak {
  double gflops = 0;  // 0: none (MFU is then 0)
  // "hardware.peak_gflops", "kiln bench peak", "start-up probe" or "none".
  std::string source = "none";
  std::string date;             // kiln bench peak: when it was measured
  int64_t raised_at_step = -1;  // a step ran faster than the peak, which was raised to it
  // For people: "start-up probe", "cached by kiln bench peak on 2026-11-25",
  // "hardware.peak_gflops", "raised to step 12's rate; was start-up probe".
  std::string describe() const;
};

// The trainer's peak for a run in `dtype` on `threads` threads, in the order above; `probe` false
// stops at the config (no cache, no measurement: tests). Notes (an ignored cache file) are
// appended to *notes for the caller to print.
Peak resolve_peak(double configured_gflops, const std::string& dtype, int threads, bool probe,
                  std::vector<std::string>* notes);

}  // namespace kiln
