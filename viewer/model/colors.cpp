// The colour table (see colors.hpp). Categories use the Tableau 10 palette with light/dark pairs
// for a kind and its transient "unsharded" twin; ops use a second, disjoint palette so a memory
// colour never appears in the timeline.
#include "viewer/model/colors.hpp"

namespace shardlab::viewer {

namespace {
constexpr Rgba kCategory[kNumMemCategories] = {
    {78, 121, 167, 255},   // params: blue
    {160, 203, 232, 255},  // params_unsharded: light blue
    {242, 142, 43, 255},   // grads: orange
    {255, 190, 125, 255},  // grads_unsharded: light orange
    {89, 161, 79, 255},    // optimizer_state: green
    {176, 122, 161, 255},  // activations: purple
    {237, 201, 72, 255},   // comm_buffers: yellow
    {156, 117, 95, 255},   // workspace: brown
    {186, 176, 172, 255},  // unattributed (imported runs): warm grey
};
constexpr Rgba kOp[kNumOpKinds] = {
    {31, 119, 180, 255},   // forward: deep blue
    {148, 103, 189, 255},  // backward: violet
    {140, 86, 75, 255},    // optimizer: brown-red
    {23, 190, 207, 255},   // all_gather: cyan
    {255, 127, 14, 255},   // reduce_scatter: deep orange
    {188, 189, 34, 255},   // all_reduce: olive
    {227, 119, 194, 255},  // h2d: pink
    {44, 160, 44, 255},    // d2h: bright green
    {127, 127, 127, 255},  // other: grey
};
constexpr Rgba kUnitState[4] = {
    {58, 63, 75, 255},     // sharded: slate
    {232, 163, 61, 255},   // gathering: amber
    {76, 183, 130, 255},   // unsharded: green
    {165, 178, 199, 255},  // resharded: light steel: sharded again after use, this step
};
constexpr Rgba kRank[8] = {{240, 240, 240, 255}, {255, 99, 132, 255}, {54, 162, 235, 255},
                           {255, 206, 86, 255},  {75, 192, 192, 255}, {153, 102, 255, 255},
                           {255, 159, 64, 255},  {201, 203, 207, 255}};
}  // namespace

Rgba category_color(MemCategory c) { return kCategory[static_cast<int>(c)]; }
Rgba op_color(OpKind k) { return kOp[static_cast<int>(k)]; }
Rgba unit_state_color(UnitState s) { return kUnitState[static_cast<int>(s)]; }
Rgba rank_color(int rank) { return kRank[(rank < 0 ? 0 : rank) % 8]; }

}  // namespace shardlab::viewer
