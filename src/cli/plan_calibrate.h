// `kiln plan --calibrate`: measures this machine and writes its hardware file (`output`, or "-"
// to print it); `json` prints the figures as one JSON object.
#pragma once
#include <string>

namespace kiln::cli {

void plan_calibrate(int threads, double seconds, int rounds, const std::string& output, bool json);

}  // namespace kiln::cli
