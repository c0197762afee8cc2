// The rank grid: every process has coordinates (dp, pp, tp) in a dp × pp × tp grid, tp varying
// fastest (so tensor-parallel peers are neighbours, on one node), then pp, then dp. Every group
// (the ranks that differ only in one coordinate) is a split of the world communicator, and all
// rank arithmetic goes through here. Only data parallelism exists today (pp = tp = 1).
#pragma once
#include <memory>
#include <string>

#include "comm/communicator.h"

namespace kiln {

struct GridShape {
  int dp = 1, pp = 1, tp = 1;
  int size() const { return dp * pp * tp; }
};

class Grid {
 public:
  // Takes the world; its size must equal the grid's (the error says which sizes would fit).
  Grid(std::unique_ptr<Communicator> world, GridShape shape);

  const GridShape& shape() const { return shape_; }
  int rank() const { return world_->rank(); }
  int dp_rank() const { return dp_rank_; }
  int pp_rank() const { return pp_rank_; }
  int tp_rank() const { return tp_rank_; }
  // World rank of the process at these coordinates.
  int rank_of(int dp, int pp, int tp) const { return (dp * shape_.pp + pp) * shape_.tp + tp; }

  Communicator& world() { return *world_; }
  Communicator& dp_group() { return *dp_; }  // same pp and tp coordinates
  Communicator& pp_group() { return *pp_; }  // same dp and tp
  Communicator& tp_group() { return *tp_; }  // same dp and pp

  // "TP(0)-PP(1)-DP(0)-Rank(2)", for log lines and errors.
  std::string name() const;

 private:
  std::unique_ptr<Communicator> world_;
  GridShape shape_;
  int dp_rank_, pp_rank_, tp_rank_;
  std::unique_ptr<Communicator> dp_, pp_, tp_;
};

}  // namespace kiln
