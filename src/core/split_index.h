// Where an element of one part of a split tensor lies in the whole tensor. A tensor of `shape`
// (row-major) is cut along dimension `dim` into `parts` equal parts; part `part` is itself a
// row-major tensor of the same shape but shape[dim] / parts along `dim`. Tensor parallelism
// (parallel/local_layout.h) and sharded checkpoints (ckpt/sharded_state.h) share this.
#pragma once
#include <cstdint>
#include <vector>

namespace kiln {

// The flat index in the whole tensor of element `i` of the part.
inline int64_t split_part_index(const std::vector<int64_t>& shape, int dim, int parts, int part,
                                int64_t i) {
  if (dim < 0 || parts <= 1) return i;
  int64_t index = 0, stride = 1;
  for (int d = static_cast<int>(shape.size()) - 1; d >= 0; d--) {
    const int64_t local = d == dim ? shape[d] / parts : shape[d];
    int64_t coord = i % local;
    i /= local;
    if (d == dim) coord += local * part;
    index += coord * stride;
    stride *= shape[d];
  }
  return index;
}

// The inverse: the index in part `part` of the element at flat index `index` of the whole
// tensor, or -1 when that element lies in another part.
inline int64_t split_local_index(const std::vector<int64_t>& shape, int dim, int parts, int part,
                                 int64_t index) {
  if (dim < 0 || parts <= 1) return index;
  int64_t local_index = 0, stride = 1;
  for (int d = static_cast<int>(shape.size()) - 1; d >= 0; d--) {
    int64_t coord = index % shape[d];
    index /= shape[d];
    const int64_t local = d == dim ? shape[d] / parts : shape[d];
    if (d == dim) {
      coord -= local * part;
      if (coord < 0 || coord >= local) return -1;
    }
    local_index += coord * stride;
    stride *= local;
  }
  return local_index;
}

}  // namespace kiln
