#include "cli/commands.h"

namespace kiln::cli {
void register_generate(CLI::App&) {}
}  // namespace kiln::cli
