// An operation of a communicator, described without formatting (no allocation or text on the
// hot path) and put into words only when an error message, the trace or the flight recorder
// needs them: "all_reduce of 4096 elements", "broadcast of 8 elements from rank 1", "barrier".
#pragma once
#include <cstdint>
#include <string>

namespace kiln {

struct OpDesc {
  const char* kind;                 // "all_reduce" (a string literal)
  int64_t count = 0;                // elements (-1: none, as for a barrier)
  const char* peer_word = nullptr;  // "from rank", "to rank" (string literals), or null
  int peer = -1;
  std::string text() const;  // the words above (the flight recorder's and the trace's)
};

}  // namespace kiln
