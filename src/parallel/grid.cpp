#include "parallel/grid.h"

#include "core/error.h"

namespace kiln {

Grid::Grid(std::unique_ptr<Communicator> world, GridShape shape)
    : world_(std::move(world)), shape_(shape) {
  if (shape.dp < 1 || shape.pp < 1 || shape.tp < 1)
    fail("the rank grid dp={} pp={} tp={} needs every size at least 1", shape.dp, shape.pp,
         shape.tp);
  if (shape.size() != world_->size())
    fail(
        "the rank grid dp={} × pp={} × tp={} has {} ranks but the job has {}; start {} processes "
        "or change the sizes",
        shape.dp, shape.pp, shape.tp, shape.size(), world_->size(), shape.size());
  const int r = world_->rank();
  tp_rank_ = r % shape.tp;
  pp_rank_ = (r / shape.tp) % shape.pp;
  dp_rank_ = r / (shape.tp * shape.pp);
  // Colors: the coordinates the group's members share. Every rank makes every split, in the same
  // order (splits are collective).
  // Named by their coordinates ("world/tp0.0": the tensor-parallel group of dp 0, pp 0), so
  // that traces and watchdog messages say which group a collective ran on.
  dp_ = world_->split(pp_rank_ * shape.tp + tp_rank_, dp_rank_,
                      fmt::format("dp{}.{}", pp_rank_, tp_rank_));
  pp_ = world_->split(dp_rank_ * shape.tp + tp_rank_, pp_rank_,
                      fmt::format("pp{}.{}", dp_rank_, tp_rank_));
  tp_ = world_->split(dp_rank_ * shape.pp + pp_rank_, tp_rank_,
                      fmt::format("tp{}.{}", dp_rank_, pp_rank_));
}

std::string Grid::name() const {
  return fmt::format("TP({})-PP({})-DP({})-Rank({})", tp_rank_, pp_rank_, dp_rank_, rank());
}

}  // namespace kiln
