// An fp64 reference of GPT-2's forward pass, written the obvious way (no GEMMs, no fusion), and
// a finite-difference helper. Gradient tests differentiate this reference numerically (central
// differences in double are accurate to ~1e-9) and compare with the fp32 hand-written backward.
#pragma once

#include <cmath>
#include <functional>
#include <random>
#include <vector>

#include "core/model/config.hpp"
#include "core/model/params.hpp"

namespace shardlab::ref {

using Vec = std::vector<double>;

inline Vec to_double(const std::vector<float>& v) { return Vec(v.begin(), v.end()); }

inline std::vector<float> random_floats(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> u(-scale, scale);
  std::vector<float> v(n);
  for (float& x : v) x = u(gen);
  return v;
}

// out (N, C) = layernorm(x) * w + b, eps 1e-5
inline Vec layernorm(const Vec& x, const double* w, const double* b, int N, int C) {
  Vec out(x.size());
  for (int i = 0; i < N; ++i) {
    const double* r = &x[static_cast<size_t>(i) * C];
    double m = 0, v = 0;
    for (int c = 0; c < C; ++c) m += r[c];
    m /= C;
    for (int c = 0; c < C; ++c) v += (r[c] - m) * (r[c] - m);
    v /= C;
    double s = 1.0 / std::sqrt(v + 1e-5);
    for (int c = 0; c < C; ++c) out[static_cast<size_t>(i) * C + c] = (r[c] - m) * s * w[c] + b[c];
  }
  return out;
}

inline double gelu(double x) {
  return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}

// out (N, OC) = inp (N, IC) @ w (IC, OC) + b
inline Vec linear(const Vec& inp, const double* w, const double* b, int N, int IC, int OC) {
  Vec out(static_cast<size_t>(N) * OC);
  for (int i = 0; i < N; ++i)
    for (int o = 0; o < OC; ++o) {
      double s = b ? b[o] : 0.0;
      for (int k = 0; k < IC; ++k) s += inp[static_cast<size_t>(i) * IC + k] * w[static_cast<size_t>(k) * OC + o];
      out[static_cast<size_t>(i) * OC + o] = s;
    }
  return out;
}

// Causal multi-head attention: qkv (B, T, 3C) -> out (B, T, C).
inline Vec attention(const Vec& qkv, int B, int T, int C, int NH) {
  const int hs = C / NH;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hs));
  Vec out(static_cast<size_t>(B) * T * C, 0.0);
  auto at = [&](int b, int t, int part, int h, int d) {
    return qkv[(static_cast<size_t>(b) * T + t) * 3 * C + part * C + h * hs + d];
  };
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < NH; ++h)
      for (int t = 0; t < T; ++t) {
        Vec s(static_cast<size_t>(t) + 1);
        double mx = -1e300;
        for (int j = 0; j <= t; ++j) {
          double dot = 0;
          for (int d = 0; d < hs; ++d) dot += at(b, t, 0, h, d) * at(b, j, 1, h, d);
          s[j] = dot * scale;
          mx = std::max(mx, s[j]);
        }
        double sum = 0;
        for (int j = 0; j <= t; ++j) sum += (s[j] = std::exp(s[j] - mx));
        for (int d = 0; d < hs; ++d) {
          double o = 0;
          for (int j = 0; j <= t; ++j) o += s[j] / sum * at(b, j, 2, h, d);
          out[(static_cast<size_t>(b) * T + t) * C + h * hs + d] = o;
        }
      }
  return out;
}

// Mean cross-entropy of logits (N, V) against targets.
inline double crossentropy(const Vec& logits, const int* targets, int N, int V) {
  double total = 0;
  for (int i = 0; i < N; ++i) {
    const double* r = &logits[static_cast<size_t>(i) * V];
    double mx = r[0];
    for (int v = 1; v < V; ++v) mx = std::max(mx, r[v]);
    double sum = 0;
    for (int v = 0; v < V; ++v) sum += std::exp(r[v] - mx);
    total += -(r[targets[i]] - mx - std::log(sum));
  }
  return total / N;
}

// One transformer block on a block unit's flat parameters.
inline Vec block(const GPTConfig& cfg, const Vec& x, const double* params, int B, int T) {
  const int N = B * T, C = cfg.n_embd;
  auto p = block_views(cfg, params);
  Vec qkv = linear(layernorm(x, p.ln1_w, p.ln1_b, N, C), p.qkv_w, p.qkv_b, N, C, 3 * C);
  Vec att = linear(attention(qkv, B, T, C, cfg.n_head), p.attproj_w, p.attproj_b, N, C, C);
  Vec r(x.size());
  for (size_t i = 0; i < r.size(); ++i) r[i] = x[i] + att[i];
  Vec h = linear(layernorm(r, p.ln2_w, p.ln2_b, N, C), p.fc_w, p.fc_b, N, C, 4 * C);
  for (double& v : h) v = gelu(v);
  Vec m = linear(h, p.fcproj_w, p.fcproj_b, N, 4 * C, C);
  for (size_t i = 0; i < r.size(); ++i) r[i] += m[i];
  return r;
}

inline Vec embedding(const GPTConfig& cfg, const double* root, const int* tokens, int B, int T) {
  const int C = cfg.n_embd;
  auto r = root_views(cfg, root);
  Vec x(static_cast<size_t>(B) * T * C);
  for (int i = 0; i < B * T; ++i)
    for (int c = 0; c < C; ++c)
      x[static_cast<size_t>(i) * C + c] =
          r.wte[static_cast<size_t>(tokens[i]) * C + c] + r.wpe[static_cast<size_t>(i % T) * C + c];
  return x;
}

// ln_f, tied head, mean cross-entropy.
inline double head(const GPTConfig& cfg, const Vec& x, const double* root, const int* targets,
                   int B, int T) {
  const int N = B * T, C = cfg.n_embd, V = cfg.vocab_size;
  auto r = root_views(cfg, root);
  Vec ln = layernorm(x, r.lnf_w, r.lnf_b, N, C);
  Vec logits(static_cast<size_t>(N) * V);
  for (int i = 0; i < N; ++i)
    for (int v = 0; v < V; ++v) {
      double s = 0;
      for (int c = 0; c < C; ++c) s += ln[static_cast<size_t>(i) * C + c] * r.wte[static_cast<size_t>(v) * C + c];
      logits[static_cast<size_t>(i) * V + v] = s;
    }
  return crossentropy(logits, targets, N, V);
}

// The whole model's mean loss; units[u] is unit u's flat parameters.
inline double model_loss(const GPTConfig& cfg, const std::vector<Vec>& units, const int* tokens,
                         const int* targets, int B, int T) {
  Vec x = embedding(cfg, units[0].data(), tokens, B, T);
  for (int l = 0; l < cfg.n_layer; ++l) x = block(cfg, x, units[1 + l].data(), B, T);
  return head(cfg, x, units[0].data(), targets, B, T);
}

// Central differences of f with respect to every element of v (restored afterwards).
inline Vec numeric_grad(Vec& v, const std::function<double()>& f, double h = 1e-5) {
  Vec g(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    double keep = v[i];
    v[i] = keep + h;
    double fp = f();
    v[i] = keep - h;
    double fm = f();
    v[i] = keep;
    g[i] = (fp - fm) / (2 * h);
  }
  return g;
}

// sum_i w_i * out_i: turns a tensor output into a scalar whose gradient wrt out is w.
inline double weighted_sum(const Vec& out, const std::vector<float>& w) {
  double s = 0;
  for (size_t i = 0; i < out.size(); ++i) s += out[i] * w[i];
  return s;
}

// max_i |a_i - n_i| / max_i |n_i|: the error relative to the gradient's scale.
inline double scaled_max_error(const std::vector<float>& analytic, const Vec& numeric) {
  double err = 0, scale = 0;
  for (size_t i = 0; i < numeric.size(); ++i) {
    err = std::max(err, std::abs(analytic[i] - numeric[i]));
    scale = std::max(scale, std::abs(numeric[i]));
  }
  return scale > 0 ? err / scale : err;
}

}  // namespace shardlab::ref
