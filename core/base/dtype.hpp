// Element types: f32, bf16 and f16, with conversions written once for CPU loops and CUDA kernels.
// bf16 and f16 are stored as raw uint16_t bits; rounding is to nearest, ties to even (IEEE 754).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "core/base/hd.hpp"

namespace shardlab {

enum class DType : uint8_t { f32 = 0, bf16 = 1, f16 = 2 };

inline constexpr size_t dtype_size(DType t) { return t == DType::f32 ? 4 : 2; }
const char* dtype_name(DType t);
// Parses "f32"/"fp32"/"float32", "bf16"/"bfloat16", "f16"/"fp16"/"float16"; throws InvalidArgument.
DType parse_dtype(const std::string& s);

struct bf16 {
  uint16_t bits;
};
struct f16 {
  uint16_t bits;
};

SL_HD uint32_t f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}
SL_HD float bits_f32(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

// ---- bf16: the top 16 bits of an f32, rounded to nearest even; NaN stays a (quiet) NaN.
SL_HD uint16_t f32_to_bf16_bits(float f) {
  uint32_t u = f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);
  uint32_t lsb = (u >> 16) & 1u;
  u += 0x7fffu + lsb;
  return static_cast<uint16_t>(u >> 16);
}
SL_HD float bf16_bits_to_f32(uint16_t h) { return bits_f32(static_cast<uint32_t>(h) << 16); }

// ---- f16: 1 sign, 5 exponent (bias 15), 10 mantissa bits; subnormals, Inf and NaN handled.
SL_HD uint16_t f32_to_f16_bits(float f) {
  uint32_t u = f32_bits(f);
  uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);   // NaN
  if (a >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow (rounds) to Inf
  if (a < 0x38800000u) {
    // Result is f16-subnormal or zero: value = a * 2^24 in units of the smallest subnormal.
    if (a < 0x33000000u) return sign;  // below half the smallest subnormal: zero
    uint32_t exp = a >> 23;
    uint32_t mant = (a & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126u - exp;  // 113 + 13 - exp... places mant so that 1 ulp = 2^-24
    uint32_t q = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1u);
    uint32_t half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (q & 1u))) ++q;
    return static_cast<uint16_t>(sign | q);
  }
  // Normal: rebias the exponent, round the 13 dropped mantissa bits to nearest even.
  uint32_t r = a - 0x38000000u;  // exponent bias 127 -> 15
  uint32_t lsb = (r >> 13) & 1u;
  r += 0xfffu + lsb;
  return static_cast<uint16_t>(sign | (r >> 13));
}
SL_HD float f16_bits_to_f32(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0x1fu) return bits_f32(sign | 0x7f800000u | (mant << 13));  // Inf / NaN
  if (exp == 0) {
    if (mant == 0) return bits_f32(sign);
    // Subnormal: mant * 2^-24, exact in f32.
    float v = static_cast<float>(mant) * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  return bits_f32(sign | ((exp + 112u) << 23) | (mant << 13));
}

// Load and store any dtype as f32; the one place that decides how a dtype maps to float.
SL_HD float load_as_f32(const void* p, size_t i, DType t) {
  switch (t) {
    case DType::f32: return static_cast<const float*>(p)[i];
    case DType::bf16: return bf16_bits_to_f32(static_cast<const uint16_t*>(p)[i]);
    default: return f16_bits_to_f32(static_cast<const uint16_t*>(p)[i]);
  }
}
SL_HD void store_from_f32(void* p, size_t i, DType t, float v) {
  switch (t) {
    case DType::f32: static_cast<float*>(p)[i] = v; break;
    case DType::bf16: static_cast<uint16_t*>(p)[i] = f32_to_bf16_bits(v); break;
    default: static_cast<uint16_t*>(p)[i] = f32_to_f16_bits(v); break;
  }
}
// Round-trips v through dtype t (identity for f32): what a value becomes once stored as t.
SL_HD float round_to(DType t, float v) {
  switch (t) {
    case DType::f32: return v;
    case DType::bf16: return bf16_bits_to_f32(f32_to_bf16_bits(v));
    default: return f16_bits_to_f32(f32_to_f16_bits(v));
  }
}

}  // namespace shardlab
