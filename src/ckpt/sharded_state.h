// State that ranks hold in shards (ZeRO's AdamW moments, tensor-parallel slices), saved by
// each rank as its own file, with no rank ever gathering the whole: "<stem>-RRRRR-of-NNNNN
// .safetensors", one 1-D tensor per logical tensor the shard touches, named by its logical
// (Hugging Face) name, and a `kiln_slices` entry in the file's metadata that says which part of
// that tensor it holds (shape, and the range [begin, end) of its flattened elements). A
// tensor-parallel rank holds a part of a tensor cut along one dimension: the slice then also
// names the part ("split": the shape cut, the dimension, part and parts) and [begin, end) counts
// the part's own elements. Any layout reads it back: a rank takes the elements of its own range
// from whichever files hold them, and every element must come from exactly one file.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace kiln {

// A logical tensor in a flat buffer: its name, shape and place; with tensor parallelism the
// buffer holds part `part` of `parts` of it, cut along dimension split_dim of split_shape (the
// same elements as `shape`, core/split_index.h), and numel counts the part's elements.
struct FlatTensor {
  std::string name;
  std::vector<int64_t> shape;
  int64_t offset = 0;
  int64_t numel = 0;
  std::vector<int64_t> split_shape = {};
  int split_dim = -1;
  int parts = 1, part = 0;
};

// One flat buffer of the state, saved with `prefix` before each tensor's name ("exp_avg.").
// `data` points at the element `begin` of the range being written or read.
struct StateBuffer {
  std::string prefix;
  float* data;
};

std::string state_shard_name(const std::string& stem, int rank, int ranks);

// Writes the elements [begin, end) of each buffer as rank `rank` of `ranks`, durably.
void write_state_shard(const std::string& dir, const std::string& stem, int rank, int ranks,
                       const std::vector<FlatTensor>& tensors, int64_t begin, int64_t end,
                       const std::vector<StateBuffer>& buffers,
                       const std::map<std::string, std::string>& metadata);

// The shard files of `stem` in dir, in rank order: all of 0..N-1 for one N, else an error naming
// what is missing or mixed. Empty when there is none.
std::vector<std::string> state_shard_files(const std::string& dir, const std::string& stem);

// Fills the elements [begin, end) of each buffer from the files, whatever layout wrote them.
// Errors name the file and tensor: a tensor unknown here or of another shape, a slice outside its
// tensor, an element given twice or by no file.
void read_state_shards(const std::vector<std::string>& files,
                       const std::vector<FlatTensor>& tensors, int64_t begin, int64_t end,
                       const std::vector<StateBuffer>& buffers);

}  // namespace kiln
