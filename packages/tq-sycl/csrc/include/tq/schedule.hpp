// Which rows and which KV range a program owns, computed on the device from metadata.
//
// Rows of request r are flattened as row = i * G + g (query token i, head g of the GQA
// group) and cut into tiles of R rows. Tile ids of request r start at
//     tile_start(r) = floor(qsl[r] * G / R) + r,
// which grows by at least ceil(q_len * G / R) from one request to the next, so a grid of
// floor(num_q_tokens * G / R) + num_reqs tiles covers every request without knowing any
// q_len on the host. A program binary-searches its request; surplus tiles exit.
//
// Every value read from metadata is clamped, so bad metadata can produce wrong numbers
// but never an out-of-bounds access (docs/design.md#one-api-several-implementations):
// query_start_loc entries into [0, num_q_tokens] (a request's end never before its start),
// seq_len into [0, bt_cols * block_size], q_len into [0, seq_len]; block ids outside
// [0, num_blocks) mask their tokens (block_of). The sizes come from the argument dict.
#pragma once

#include <climits>
#include <cstdint>

#include "params.hpp"

namespace tq {

struct TileRows {
  int32_t req;
  int64_t q_start;   // first query token of the request
  int32_t q_len;
  int32_t seq_len;
  int32_t row_begin;  // flattened rows [row_begin, row_end) of the request
  int32_t row_end;
  int32_t kv_end;  // positions [0, kv_end) are visible to at least one row of the tile
};

inline int64_t clamp64(int64_t v, int64_t lo, int64_t hi) { return v < lo ? lo : (v > hi ? hi : v); }

inline int64_t tile_start(const AttentionParams& p, int32_t r) {
  const int64_t q0 = clamp64(p.query_start_loc[r], 0, p.num_q_tokens);
  return q0 * group_size(p) / p.rows_per_tile + r;
}

inline bool locate_tile(const AttentionParams& p, int64_t tile, TileRows* out) {
  if (p.num_reqs <= 0) return false;
  int32_t lo = 0;
  int32_t hi = p.num_reqs - 1;
  while (lo < hi) {
    const int32_t mid = lo + (hi - lo + 1) / 2;
    if (tile_start(p, mid) <= tile)
      lo = mid;
    else
      hi = mid - 1;
  }
  const int32_t r = lo;
  const int64_t first = tile_start(p, r);
  if (first > tile) return false;
  const int32_t g = group_size(p);
  const int64_t q0 = clamp64(p.query_start_loc[r], 0, p.num_q_tokens);
  const int64_t q1 = clamp64(p.query_start_loc[r + 1], q0, p.num_q_tokens);
  // positions stay below INT32_MAX - kTileTokens, so a tile's int32 position math cannot overflow
  const int64_t capacity =
      clamp64(static_cast<int64_t>(p.bt_cols) * p.layout.block_size, 0, INT32_MAX - kTileTokens);
  const int32_t seq_len = static_cast<int32_t>(clamp64(p.seq_lens[r], 0, capacity));
  const int32_t q_len = static_cast<int32_t>(clamp64(q1 - q0, 0, seq_len));
  const int64_t row_begin = (tile - first) * p.rows_per_tile;
  const int64_t rows = static_cast<int64_t>(q_len) * g;
  if (row_begin >= rows) return false;
  const int64_t row_end = clamp64(row_begin + p.rows_per_tile, 0, rows);
  const int32_t last_token = static_cast<int32_t>((row_end - 1) / g);
  out->req = r;
  out->q_start = q0;
  out->q_len = q_len;
  out->seq_len = seq_len;
  out->row_begin = static_cast<int32_t>(row_begin);
  out->row_end = static_cast<int32_t>(row_end);
  out->kv_end = seq_len - q_len + last_token + 1;
  return true;
}

// Causal limit of a flattened row: it sees positions <= this.
inline int32_t row_max_pos(const TileRows& t, int32_t row, int32_t g) { return t.seq_len - t.q_len + row / g; }

// Split s of n covers [begin, end) of [0, kv_end), cut on tile boundaries so that the
// splits' tiles line up with those of a single-split run.
inline void split_range(int32_t kv_end, int32_t n, int32_t s, int32_t* begin, int32_t* end) {
  const int64_t per_split = (static_cast<int64_t>(kv_end) + n - 1) / n;
  const int64_t per = (per_split + kTileTokens - 1) / kTileTokens * kTileTokens;
  const int64_t b = clamp64(per * s, 0, kv_end);
  *begin = static_cast<int32_t>(b);
  *end = static_cast<int32_t>(clamp64(b + per, 0, kv_end));
}

// One attention program: a (row tile, kv head, split), the tile's rows and the split's
// KV positions [begin, end). The host core and every kernel family start from it.
struct Program {
  int64_t tile;
  int32_t head;
  int32_t split;
  TileRows t;
  int32_t g;     // GQA group size
  int32_t rows;  // t.row_end - t.row_begin
  int32_t begin;
  int32_t end;
};

// Programs of a launch: every (tile, kv head, split), tile-major, split fastest.
inline int64_t num_programs(const AttentionParams& p) { return num_row_tiles(p) * p.num_kv_heads * p.num_splits; }

// Program `index` of [0, num_programs); false for a surplus tile (nothing to compute).
inline bool locate_program(const AttentionParams& p, int64_t index, Program* out) {
  out->split = static_cast<int32_t>(index % p.num_splits);
  out->head = static_cast<int32_t>((index / p.num_splits) % p.num_kv_heads);
  out->tile = index / p.num_splits / p.num_kv_heads;
  if (!locate_tile(p, out->tile, &out->t)) return false;
  out->g = group_size(p);
  out->rows = out->t.row_end - out->t.row_begin;
  split_range(out->t.kv_end, p.num_splits, out->split, &out->begin, &out->end);
  return true;
}

// Physical block of position pos, or -1 when the block table points outside the cache
// (such tokens are masked, never read).
inline int64_t block_of(const AttentionParams& p, int32_t req, int32_t pos) {
  const int32_t col = pos / p.layout.block_size;
  if (col < 0 || col >= p.bt_cols) return -1;
  const int64_t b = p.block_table[static_cast<int64_t>(req) * p.bt_stride + col];
  return (b < 0 || b >= p.num_blocks) ? -1 : b;
}

// Query row pointer offsets (elements) for flattened row `row` of kv head `head`.
inline int64_t query_token(const TileRows& t, int32_t row, int32_t g) { return t.q_start + row / g; }
inline int32_t query_head(int32_t head, int32_t row, int32_t g) { return head * g + row % g; }

}  // namespace tq
