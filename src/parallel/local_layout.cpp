#include "parallel/local_layout.h"

#include "core/error.h"

namespace kiln {

int64_t LocalTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : local_shape) n *= d;
  return n;
}

int64_t LocalTensor::logical_index(int64_t i) const {
  if (split_dim < 0) return i;
  // Row-major: peel off the local coordinates from the last dimension, shifting split_dim's.
  int64_t index = 0, stride = 1;
  for (int d = static_cast<int>(local_shape.size()) - 1; d >= 0; d--) {
    int64_t coord = i % local_shape[d];
    i /= local_shape[d];
    if (d == split_dim) coord += split_begin;
    index += coord * stride;
    stride *= logical_shape[d];
  }
  return index;
}

const LocalTensor& LocalLayout::find(const std::string& name) const {
  for (const auto& t : tensors)
    if (t.name == name) return t;
  fail("no tensor {} in this rank's layout", name);
}

LocalLayout local_layout(const std::vector<LogicalTensor>& logical, int parts, int part,
                         const std::function<int(const std::string& name)>& split_dim) {
  if (parts < 1 || part < 0 || part >= parts)
    fail("part {} of {} is not a part of a layout", part, parts);
  LocalLayout out;
  for (const auto& t : logical) {
    LocalTensor l;
    l.name = t.name;
    l.logical_shape = l.local_shape = t.shape;
    const int dim = parts > 1 && split_dim ? split_dim(t.name) : -1;
    if (dim >= 0) {
      if (dim >= static_cast<int>(t.shape.size()))
        fail("{} has {} dimensions; it cannot be split along dimension {}", t.name, t.shape.size(),
             dim);
      if (t.shape[dim] % parts != 0)
        fail("{}: dimension {} of size {} does not divide into {} parts", t.name, dim, t.shape[dim],
             parts);
      l.split_dim = dim;
      l.local_shape[dim] = t.shape[dim] / parts;
      l.split_begin = l.local_shape[dim] * part;
    }
    l.offset = out.total;
    out.total += l.numel();
    out.tensors.push_back(std::move(l));
  }
  return out;
}

}  // namespace kiln
