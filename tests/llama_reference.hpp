// fp64 references of the Llama pieces, written the obvious way (loops, no GEMMs, no fusion), as
// Hugging Face's modeling_llama.py states them: LlamaRMSNorm, rotate_half / apply_rotary_pos_emb,
// repeat_kv before eager attention, and the SwiGLU MLP. Gradient tests differentiate these
// numerically (model_reference.hpp's numeric_grad) and compare with the fp32 backward.
#pragma once

#include <cmath>
#include <vector>

#include "core/kernels/rope.hpp"
#include "core/model/llama_layers.hpp"
#include "tests/model_reference.hpp"

namespace shardlab::ref {

// out (N, C) = weight * x / sqrt(mean(x^2) + eps)
inline Vec rmsnorm(const Vec& x, const double* w, int N, int C, double eps) {
  Vec out(x.size());
  for (int i = 0; i < N; ++i) {
    const double* r = &x[static_cast<size_t>(i) * C];
    double ss = 0;
    for (int c = 0; c < C; ++c) ss += r[c] * r[c];
    const double s = 1.0 / std::sqrt(ss / C + eps);
    for (int c = 0; c < C; ++c) out[static_cast<size_t>(i) * C + c] = w[c] * (r[c] * s);
  }
  return out;
}

// inv_freq_i = theta^(-2i/hs), in double.
inline double rope_inv_freq(int i, int hs, double theta) {
  return 1.0 / std::pow(theta, 2.0 * i / hs);
}

// apply_rotary_pos_emb on B*T rows of ld values: heads [0, n_heads) of hs at the front of each
// row turn by position (row % T), the rest is copied. inv_freq: hs/2 values.
inline Vec rope(const Vec& x, const std::vector<double>& inv_freq, int B, int T, int n_heads,
                int hs, int ld) {
  Vec out = x;
  const int h = hs / 2;
  for (int r = 0; r < B * T; ++r) {
    const int t = r % T;
    for (int head = 0; head < n_heads; ++head) {
      const double* q = &x[static_cast<size_t>(r) * ld + static_cast<size_t>(head) * hs];
      double* o = &out[static_cast<size_t>(r) * ld + static_cast<size_t>(head) * hs];
      for (int d = 0; d < hs; ++d) {
        // cos and sin of cat(freqs, freqs); rotate_half(q) = cat(-q2, q1)
        const double a = t * inv_freq[d % h];
        const double rot = d < h ? -q[d + h] : q[d - h];
        o[d] = q[d] * std::cos(a) + rot * std::sin(a);
      }
    }
  }
  return out;
}

// silu(gate) * up on (N, 2F) rows of gate | up.
inline Vec swiglu(const Vec& gate_up, int N, int F) {
  Vec out(static_cast<size_t>(N) * F);
  for (int i = 0; i < N; ++i)
    for (int f = 0; f < F; ++f) {
      const double g = gate_up[static_cast<size_t>(i) * 2 * F + f];
      const double u = gate_up[static_cast<size_t>(i) * 2 * F + F + f];
      out[static_cast<size_t>(i) * F + f] = g / (1.0 + std::exp(-g)) * u;
    }
  return out;
}

// Causal grouped-query attention: qkv (B, T, (NH + 2 NKV) hs) as q | k | v; K/V head j repeated
// for query heads [j G, (j+1) G) (repeat_kv), then eager attention. Returns (B, T, NH hs).
inline Vec gqa_attention(const Vec& qkv, int B, int T, int NH, int NKV, int hs) {
  const int G = NH / NKV;
  const int ld = (NH + 2 * NKV) * hs;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hs));
  Vec out(static_cast<size_t>(B) * T * NH * hs, 0.0);
  auto at = [&](int b, int t, int col) { return qkv[(static_cast<size_t>(b) * T + t) * ld + col]; };
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < NH; ++h) {
      const int kcol = NH * hs + (h / G) * hs, vcol = (NH + NKV) * hs + (h / G) * hs;
      for (int t = 0; t < T; ++t) {
        Vec s(static_cast<size_t>(t) + 1);
        double mx = -1e300;
        for (int j = 0; j <= t; ++j) {
          double dot = 0;
          for (int d = 0; d < hs; ++d) dot += at(b, t, h * hs + d) * at(b, j, kcol + d);
          s[j] = dot * scale;
          mx = std::max(mx, s[j]);
        }
        double sum = 0;
        for (int j = 0; j <= t; ++j) sum += (s[j] = std::exp(s[j] - mx));
        for (int d = 0; d < hs; ++d) {
          double o = 0;
          for (int j = 0; j <= t; ++j) o += s[j] / sum * at(b, j, vcol + d);
          out[(static_cast<size_t>(b) * T + t) * NH * hs + h * hs + d] = o;
        }
      }
    }
  return out;
}

// out (N, OC) = inp (N, IC) @ w^T + b, w (OC, IC) as torch.nn.Linear's.
inline Vec linear_oi(const Vec& inp, const double* w, const double* b, int N, int IC, int OC) {
  Vec out(static_cast<size_t>(N) * OC);
  for (int i = 0; i < N; ++i)
    for (int o = 0; o < OC; ++o) {
      double s = b ? b[o] : 0.0;
      for (int k = 0; k < IC; ++k)
        s += inp[static_cast<size_t>(i) * IC + k] * w[static_cast<size_t>(o) * IC + k];
      out[static_cast<size_t>(i) * OC + o] = s;
    }
  return out;
}

// The rotary frequencies of cfg, as the kernels compute them (fp32 f_i, rope.hpp).
inline std::vector<double> llama_inv_freq(const GPTConfig& cfg) {
  RopeParams p;
  p.theta = cfg.rope_theta;
  if (cfg.rope_llama3) {
    p.scaling = RopeScaling::llama3;
    p.factor = cfg.rope_factor;
    p.low_freq_factor = cfg.rope_low_freq_factor;
    p.high_freq_factor = cfg.rope_high_freq_factor;
    p.original_max_position_embeddings = static_cast<float>(cfg.rope_original_max_pos);
  }
  std::vector<double> f(static_cast<size_t>(cfg.head_dim() / 2));
  for (size_t i = 0; i < f.size(); ++i)
    f[i] = rope_inv_freq(static_cast<int>(i), cfg.head_dim(), p);
  return f;
}

// One Llama layer's attention half on its flat parameters: x + o_proj(attn(rope(qkv(norm(x))))).
inline Vec llama_attn(const GPTConfig& cfg, const Vec& x, const double* params, int B, int T) {
  const int N = B * T, C = cfg.n_embd, hs = cfg.head_dim(), NH = cfg.n_head, NKV = cfg.kv_heads();
  const int q = NH * hs, qkv = (NH + 2 * NKV) * hs;
  auto p = llama_attn_views(cfg, params);
  Vec h = linear_oi(rmsnorm(x, p.norm, N, C, cfg.norm_eps), p.qkv_w, p.qkv_b, N, C, qkv);
  h = rope(h, llama_inv_freq(cfg), B, T, NH + NKV, hs, qkv);
  Vec o = linear_oi(gqa_attention(h, B, T, NH, NKV, hs), p.o_w, p.o_b, N, q, C);
  for (size_t i = 0; i < o.size(); ++i) o[i] += x[i];
  return o;
}

// The MLP half: x + down_proj(silu(gate_proj(h)) * up_proj(h)), h = norm(x).
inline Vec llama_mlp(const GPTConfig& cfg, const Vec& x, const double* params, int B, int T) {
  const int N = B * T, C = cfg.n_embd, F = cfg.ffn_dim;
  auto p = llama_mlp_views(cfg, params);
  Vec gu = linear_oi(rmsnorm(x, p.norm, N, C, cfg.norm_eps), p.gate_up_w, p.gate_up_b, N, C, 2 * F);
  Vec o = linear_oi(swiglu(gu, N, F), p.down_w, p.down_b, N, F, C);
  for (size_t i = 0; i < o.size(); ++i) o[i] += x[i];
  return o;
}

// A whole Llama model's mean loss: embed (V, C), per layer its attention and MLP halves, the final
// norm (C) and the head (V, C) (the embedding again when tied).
inline double llama_loss(const GPTConfig& cfg, const Vec& embed, const std::vector<Vec>& attn,
                         const std::vector<Vec>& mlp, const Vec& norm, const Vec& head,
                         const int* tokens, const int* targets, int B, int T) {
  const int N = B * T, C = cfg.n_embd, V = cfg.vocab_size;
  Vec x(static_cast<size_t>(N) * C);
  for (int i = 0; i < N; ++i)
    for (int c = 0; c < C; ++c)
      x[static_cast<size_t>(i) * C + c] = embed[static_cast<size_t>(tokens[i]) * C + c];
  for (int l = 0; l < cfg.n_layer; ++l) {
    x = llama_attn(cfg, x, attn[l].data(), B, T);
    x = llama_mlp(cfg, x, mlp[l].data(), B, T);
  }
  const Vec& w = cfg.tie_embeddings ? embed : head;
  Vec logits = linear_oi(rmsnorm(x, norm.data(), N, C, cfg.norm_eps), w.data(), nullptr, N, C, V);
  return crossentropy(logits, targets, N, V);
}

}  // namespace shardlab::ref
