// `kiln plan --list-models`, `--list-gpus`, `--list-software`: the planner's catalogs, one
// line (or two) an entry, each with its source.
#pragma once

namespace kiln::cli {

void list_models();
void list_gpus();
void list_software();

}  // namespace kiln::cli
