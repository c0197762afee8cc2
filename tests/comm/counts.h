// Slice counts for the collectives tests: even shares, and uneven ones with an empty rank.
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

namespace kiln::test {

// n elements over P ranks, the first n % P one more.
inline std::vector<int64_t> even_counts(int64_t n, int P) {
  std::vector<int64_t> c(P);
  for (int r = 0; r < P; r++) c[r] = n / P + (r < n % P ? 1 : 0);
  return c;
}

// Uneven counts summing to n: rank `salt % P` gets none, the others unequal shares.
inline std::vector<int64_t> uneven_counts(int64_t n, int P, int salt) {
  std::vector<int64_t> c(P, 0);
  const int empty = salt % P, last = empty == P - 1 ? P - 2 : P - 1;  // last: what is left
  int64_t left = n;
  for (int r = 0; r < P; r++) {
    if (r == empty || r == last) continue;
    c[r] = std::min(left, left / 3 + r);
    left -= c[r];
  }
  c[last] = left;
  return c;
}

}  // namespace kiln::test
