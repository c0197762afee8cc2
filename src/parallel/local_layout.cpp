#include "parallel/local_layout.h"

#include "core/error.h"
#include "core/split_index.h"

namespace kiln {

int64_t LocalTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : local_shape) n *= d;
  return n;
}

int64_t LocalTensor::logical_index(int64_t i) const {
  return split_part_index(split_shape, split_dim, parts, part, i);
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
    l.logical_shape = t.shape;
    l.split_shape = l.local_shape = t.split_shape.empty() ? t.shape : t.split_shape;
    const std::vector<int64_t>& shape = l.split_shape;
    const int dim = parts > 1 && split_dim ? split_dim(t.name) : -1;
    if (dim >= 0) {
      if (dim >= static_cast<int>(shape.size()))
        fail("{} has {} dimensions; it cannot be split along dimension {}", t.name, shape.size(),
             dim);
      if (shape[dim] % parts != 0)
        fail("{}: dimension {} of size {} does not divide into {} parts", t.name, dim, shape[dim],
             parts);
      l.split_dim = dim;
      l.parts = parts;
      l.part = part;
      l.local_shape[dim] = shape[dim] / parts;
      l.split_begin = l.local_shape[dim] * part;
    }
    l.offset = out.total;
    out.total += l.numel();
    out.tensors.push_back(std::move(l));
  }
  return out;
}

}  // namespace kiln
