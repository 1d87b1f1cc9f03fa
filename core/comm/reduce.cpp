// Rank-order reduction in f32 with one final rounding; loops are kept simple so they vectorise.
#include "core/comm/reduce.hpp"

#include <algorithm>
#include <cstring>

namespace shardlab {

namespace {

// acc[i] (=|+=) src[i] as f32.
template <bool kFirst>
void accumulate(float* acc, const void* src, int64_t len, DType t) {
  switch (t) {
    case DType::f32: {
      const float* s = static_cast<const float*>(src);
      for (int64_t i = 0; i < len; ++i) acc[i] = kFirst ? s[i] : acc[i] + s[i];
      break;
    }
    case DType::bf16: {
      const uint16_t* s = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < len; ++i) {
        float v = bf16_bits_to_f32(s[i]);
        acc[i] = kFirst ? v : acc[i] + v;
      }
      break;
    }
    case DType::f16: {
      const uint16_t* s = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < len; ++i) {
        float v = f16_bits_to_f32(s[i]);
        acc[i] = kFirst ? v : acc[i] + v;
      }
      break;
    }
  }
}

void round_into(void* out, const float* acc, int64_t len, DType t) {
  uint16_t* o = static_cast<uint16_t*>(out);
  if (t == DType::bf16) {
    for (int64_t i = 0; i < len; ++i) o[i] = f32_to_bf16_bits(acc[i]);
  } else {
    for (int64_t i = 0; i < len; ++i) o[i] = f32_to_f16_bits(acc[i]);
  }
}

}  // namespace

int64_t reduce_staging_bytes(int64_t len, DType t) {
  const int64_t block = std::min(len, kReduceBlock);
  return block * 4 + (t == DType::f32 ? 0 : block * 2);
}

void reduce_rank_order(const void* const* src, int n, void* const* dst, int ndst, int64_t len,
                       DType t, ReduceOp op, void* staging) {
  const int64_t es = static_cast<int64_t>(dtype_size(t));
  float* acc = static_cast<float*>(staging);
  void* out = acc + std::min(len, kReduceBlock);
  const float fn = static_cast<float>(n);
  for (int64_t b = 0; b < len; b += kReduceBlock) {
    const int64_t m = std::min(kReduceBlock, len - b);
    const int64_t off = b * es;
    accumulate<true>(acc, static_cast<const char*>(src[0]) + off, m, t);
    for (int j = 1; j < n; ++j)
      accumulate<false>(acc, static_cast<const char*>(src[j]) + off, m, t);
    if (op == ReduceOp::avg)
      for (int64_t i = 0; i < m; ++i) acc[i] = acc[i] / fn;  // a division, as the contract says
    const void* result = acc;
    if (t != DType::f32) {
      round_into(out, acc, m, t);
      result = out;
    }
    for (int k = 0; k < ndst; ++k)
      std::memcpy(static_cast<char*>(dst[k]) + off, result, static_cast<size_t>(m * es));
  }
}

}  // namespace shardlab
