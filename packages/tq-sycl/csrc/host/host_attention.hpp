// Host (CPU, no SYCL) implementation of tq attention over the core headers.
//
// It runs the same program decomposition as the SYCL kernels: a query-rotation pass,
// one program per (row tile, kv head, split) that dequantises each K/V tile once and
// applies it to all the tile's rows, and a log-sum-exp merge. The tests hold it against
// tq_core.attention, which checks the core headers every SYCL kernel includes.
#pragma once

#include <cstdint>

#include "tq/params.hpp"
#include "tq/schedule.hpp"

namespace tq::host {

// Fills p.q_rot for every query row: Hadamard-rotated (Lloyd-Max presets) and
// multiplied by scale * log2(e).
void rotate_queries(const AttentionParams& p);

// One program (tq::locate_program): writes the split partials (acc, m, l) of all its rows.
void run_program(const AttentionParams& p, const Program& prog);

// Combines the split partials of `tile` and writes the output rows.
void merge_tile(const AttentionParams& p, int64_t tile, int32_t head);

// Whole call; allocates q_rot and the split workspace itself (ignores those fields).
void attention(AttentionParams p);

}  // namespace tq::host
