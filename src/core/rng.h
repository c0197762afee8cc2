// A small, portable random number generator. std::normal_distribution differs between standard
// libraries; kiln needs the same bits everywhere, so it draws its own numbers (SplitMix64 stream,
// Box-Muller normals).
#pragma once
#include <cmath>
#include <cstdint>

namespace kiln {

class Rng {
 public:
  explicit Rng(uint64_t seed = 0) : state_(seed) {}
  uint64_t next_u64() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  // Uniform in [0, 1) with 53 random bits.
  double uniform() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }
  // Uniform integer in [0, n).
  uint64_t below(uint64_t n) { return static_cast<uint64_t>(uniform() * static_cast<double>(n)); }
  double normal() {
    double u1 = uniform(), u2 = uniform();
    if (u1 < 1e-300) u1 = 1e-300;
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }
  // Moves the stream on as n calls of next_u64() would (SplitMix64's state only counts): a
  // range of draws can start anywhere, so long streams can be split across threads exactly.
  void skip(uint64_t n) { state_ += n * 0x9e3779b97f4a7c15ULL; }
  uint64_t state() const { return state_; }
  void set_state(uint64_t s) { state_ = s; }

 private:
  uint64_t state_;
};

// Mixes two 64-bit values into a seed, for derived streams (per epoch, per tensor).
inline uint64_t mix_seed(uint64_t a, uint64_t b) {
  Rng r(a ^ (b * 0x9e3779b97f4a7c15ULL + 0x632be59bd9b4e019ULL));
  return r.next_u64();
}

}  // namespace kiln
