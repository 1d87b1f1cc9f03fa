// dtype names and parsing.
#include "core/base/dtype.hpp"

#include "core/base/error.hpp"

namespace shardlab {

const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::bf16: return "bf16";
    case DType::f16: return "f16";
  }
  return "?";
}

DType parse_dtype(const std::string& s) {
  if (s == "f32" || s == "fp32" || s == "float32") return DType::f32;
  if (s == "bf16" || s == "bfloat16") return DType::bf16;
  if (s == "f16" || s == "fp16" || s == "float16") return DType::f16;
  SL_THROW(InvalidArgument, "unknown dtype '", s, "' (expected f32, bf16 or f16)");
}

}  // namespace shardlab
