// The source folders depend on each other only downwards (docs/architecture.md, "Layers"): a
// folder includes only the folders this table allows. A new arrow is a design decision, made
// here and in the document, not by accident.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <string>

namespace {

namespace fs = std::filesystem;

const std::map<std::string, std::set<std::string>> kMayUse = {
    {"core", {}},
    {"kernels", {"core"}},
    {"model", {"core", "kernels", "parallel"}},
    {"comm", {"core"}},
    {"parallel", {"core", "kernels", "comm"}},  // kernels: the tensor-parallel layers' math
    {"data", {"core"}},
    {"ckpt", {"core", "comm"}},
    {"obs", {"core"}},
    {"launch", {"core", "obs"}},
    {"plan", {"core", "model"}},  // model/spec.h only: the one model description
    {"train", {"core", "kernels", "model", "comm", "parallel", "data", "ckpt", "obs", "launch"}},
    {"cli",
     {"core", "kernels", "model", "comm", "parallel", "data", "ckpt", "obs", "launch", "plan",
      "train"}},
};

TEST(Layering, EveryFolderIncludesOnlyTheFoldersBelowIt) {
  const fs::path src = fs::path(KILN_SOURCE_DIR) / "src";
  static const std::regex include(R"(^\s*#\s*include\s+"([a-z_]+)/)");
  int files = 0;
  for (const auto& dir : fs::directory_iterator(src)) {
    const std::string folder = dir.path().filename().string();
    auto allowed = kMayUse.find(folder);
    ASSERT_NE(allowed, kMayUse.end()) << "src/" << folder << " is not in the layering table";
    for (const auto& f : fs::recursive_directory_iterator(dir.path())) {
      const std::string ext = f.path().extension().string();
      if (ext != ".h" && ext != ".cpp" && ext != ".inc") continue;
      files++;
      std::ifstream in(f.path());
      int line_no = 0;
      for (std::string line; std::getline(in, line);) {
        line_no++;
        std::smatch m;
        if (!std::regex_search(line, m, include)) continue;
        const std::string to = m[1];
        if (to == folder || !kMayUse.count(to)) continue;  // itself, or not a kiln folder
        EXPECT_TRUE(allowed->second.count(to))
            << fs::relative(f.path(), src.parent_path()).string() << ":" << line_no << ": "
            << folder << " includes " << to << " (" << line << ")";
      }
    }
  }
  EXPECT_GT(files, 50);  // the walk found the tree
}

}  // namespace
