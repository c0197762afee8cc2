#include "cli/commands.h"

namespace kiln::cli {
void register_bench(CLI::App&) {}
}  // namespace kiln::cli
