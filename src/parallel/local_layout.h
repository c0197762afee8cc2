// Where this rank's part of each logical tensor lives. A logical tensor (its Hugging Face name and
// full shape) maps to a local tensor: the whole of it, or an even slice along one dimension
// (tensor parallelism: part `part` of `parts`), placed at an offset in this rank's flat buffer.
// Tensor parallelism gives the split dimensions (model/model.h, tp_local_layout), and sharded
// checkpoints read from here which part of which logical tensor a rank holds.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace kiln {

struct LogicalTensor {
  std::string name;
  std::vector<int64_t> shape;
  // The shape the split is made in, when not `shape` itself: the same elements seen with more
  // dimensions (GPT-2's fused (C, 3C) QKV weight as (C, 3, C), so that a part holds its heads'
  // columns of q, k and v). Empty: `shape`.
  std::vector<int64_t> split_shape = {};
};

struct LocalTensor {
  std::string name;
  std::vector<int64_t> logical_shape;
  std::vector<int64_t> split_shape;  // logical_shape, or the shape the split is made in
  std::vector<int64_t> local_shape;  // this part's, in split_shape's dimensions
  int split_dim = -1;                // the dimension of split_shape cut into parts; -1: whole here
  int parts = 1, part = 0;           // this is part `part` of `parts` along split_dim
  int64_t split_begin = 0;  // where this part starts along split_dim, in the logical tensor
  int64_t offset = 0;       // where it starts in this rank's flat buffer
  int64_t numel() const;
  // The flat index in the logical tensor of element `i` of this local tensor (row-major).
  int64_t logical_index(int64_t i) const;
};

struct LocalLayout {
  std::vector<LocalTensor> tensors;
  int64_t total = 0;
  const LocalTensor& find(const std::string& name) const;  // throws naming the tensor
};

// The local layout of part `part` of `parts`: split_dim(name) is the dimension a tensor is cut
// along (-1: kept whole on every part). Tensors follow each other in the given order. An error
// names the tensor when its dimension does not divide into `parts`.
LocalLayout local_layout(const std::vector<LogicalTensor>& logical, int parts, int part,
                         const std::function<int(const std::string& name)>& split_dim = {});

}  // namespace kiln
