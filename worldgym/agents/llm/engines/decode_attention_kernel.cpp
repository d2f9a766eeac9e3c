// Decode attention on CPU: one query token per row and head, grouped KV heads, a long KV cache.
//
// decode_attention(query [B, Hkv, G, D], key/value [B, Hkv, T, D] (any strides but the last), mask [B or 1, T]
// float32 additive or empty, scaling) -> [B, Hkv, G, D] in the query's dtype.
//
// Each (row, KV head) is one task: the group's G queries are scored against every key in one pass over the keys,
// softmaxed in float32 and summed over the values in one pass over the values, so the cache is read once. Blocks
// of 16 positions that the mask hides entirely (padding) are skipped in both passes. Built with AVX512-BF16 the
// bf16 scores use its dot-product instruction (products exact, sums in float32), with AVX512F the float32 ones
// use fused multiply-adds; 16 keys' dot products are summed across lanes in one pairwise tree, and the value sums
// stay in vector registers for the whole pass (no load and store of each sum per position); elsewhere plain
// float32 loops that the compiler vectorises as it can.
// Work per task is fixed and summed in a fixed order, so results do not depend on the number of threads.

#include <torch/extension.h>
#include <ATen/Parallel.h>

#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#include "vector_math.h"

namespace {

constexpr int64_t kBlock = 16;

inline float to_float(const c10::BFloat16 value) { return static_cast<float>(value); }
inline float to_float(const float value) { return value; }

// Whether mask positions [start, start + count) are all -inf (a hidden block).
inline bool hidden(const float* mask, int64_t start, int64_t count) {
  if (mask == nullptr) return false;
  for (int64_t t = start; t < start + count; ++t) {
    if (mask[t] != -std::numeric_limits<float>::infinity()) return false;
  }
  return true;
}

#if defined(__AVX512F__)
// One level of a pairwise tree over lanes: lanes of a and b brought together and added so that after levels
// 0, 1, 2 and 3 over 16 vectors, lane j of the last holds the sum of the 16 lanes of the j-th (sum_lanes).
template <int kLevel>
inline __m512 fold(__m512 a, __m512 b) {
  const __m512i low[4] = {
      _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23),
      _mm512_setr_epi32(0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27),
      _mm512_setr_epi32(0, 1, 4, 5, 8, 9, 12, 13, 16, 17, 20, 21, 24, 25, 28, 29),
      _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30)};
  const __m512i high[4] = {
      _mm512_setr_epi32(8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31),
      _mm512_setr_epi32(4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31),
      _mm512_setr_epi32(2, 3, 6, 7, 10, 11, 14, 15, 18, 19, 22, 23, 26, 27, 30, 31),
      _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31)};
  return _mm512_add_ps(_mm512_permutex2var_ps(a, low[kLevel], b), _mm512_permutex2var_ps(a, high[kLevel], b));
}

// One vector whose lane j is the sum of the 16 lanes of vector(j), j = 0..15: each vector is folded into the tree
// as soon as it is made, so at most a few are held at once (no array of 16 vectors in memory).
template <typename Vector>
inline __m512 sum_lanes(Vector vector) {
  __m512 quarters[2];
  for (int q = 0; q < 2; ++q) {
    __m512 eighths[2];
    for (int e = 0; e < 2; ++e) {
      __m512 pairs[2];
      for (int p = 0; p < 2; ++p) {
        const int j = 8 * q + 4 * e + 2 * p;
        pairs[p] = fold<0>(vector(j), vector(j + 1));
      }
      eighths[e] = fold<1>(pairs[0], pairs[1]);
    }
    quarters[q] = fold<2>(eighths[0], eighths[1]);
  }
  return fold<3>(quarters[0], quarters[1]);
}

// Whether a dtype's scores have a vector path (float32 with AVX512F, bf16 with AVX512-BF16), and how many values
// of a head one step of partial_dot takes.
template <typename scalar_t>
constexpr bool kVectorDot = std::is_same_v<scalar_t, float>
#if defined(__AVX512BF16__)
                            || std::is_same_v<scalar_t, c10::BFloat16>
#endif
    ;
template <typename scalar_t>
constexpr int64_t kDotWidth = std::is_same_v<scalar_t, float> ? 16 : 32;

// 16 partial sums whose total is q . k over D values.
inline __m512 partial_dot(const float* q, const float* k, int64_t D) {
  __m512 acc = _mm512_setzero_ps();
  for (int64_t d = 0; d < D; d += 16) acc = _mm512_fmadd_ps(_mm512_loadu_ps(k + d), _mm512_loadu_ps(q + d), acc);
  return acc;
}
#if defined(__AVX512BF16__)
inline __m512 partial_dot(const c10::BFloat16* q, const c10::BFloat16* k, int64_t D) {
  __m512 acc = _mm512_setzero_ps();
  for (int64_t d = 0; d < D; d += 32)
    acc = _mm512_dpbf16_ps(acc, (__m512bh)_mm512_loadu_si512(k + d), (__m512bh)_mm512_loadu_si512(q + d));
  return acc;
}
#endif

// 16 bf16 values widened to float32.
inline __m512 load_bf16(const c10::BFloat16* p) {
  const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(raw), 16));
}
inline __m512 load16(const c10::BFloat16* p) { return load_bf16(p); }
inline __m512 load16(const float* p) { return _mm512_loadu_ps(p); }
#endif

template <typename scalar_t>
struct Task {
  const scalar_t* query;  // [G, D] contiguous
  const scalar_t* key;    // T rows, key_stride apart
  const scalar_t* value;  // T rows, value_stride apart
  const float* mask;      // [T] or nullptr
  scalar_t* out;          // [G, D] contiguous
  int64_t groups, dim, length, key_stride, value_stride;
  float scaling;
};

// scores[g * T + t] = (q_g . k_t) * scaling + mask[t]; hidden blocks are left at -inf.
template <typename scalar_t>
void score_keys(const Task<scalar_t>& task, float* scores) {
  const int64_t G = task.groups, D = task.dim, T = task.length;
  std::vector<float> query(G * D);
  for (int64_t i = 0; i < G * D; ++i) query[i] = to_float(task.query[i]);
  for (int64_t start = 0; start < T; start += kBlock) {
    const int64_t count = std::min(kBlock, T - start);
    if (hidden(task.mask, start, count)) {
      for (int64_t g = 0; g < G; ++g)
        for (int64_t t = start; t < start + count; ++t) scores[g * T + t] = -std::numeric_limits<float>::infinity();
      continue;
    }
#if defined(__AVX512F__)
    if constexpr (kVectorDot<scalar_t>) {
      if (count == kBlock && D % kDotWidth<scalar_t> == 0) {
        for (int64_t g = 0; g < G; ++g) {
          const scalar_t* q = task.query + g * D;
          const scalar_t* k = task.key + start * task.key_stride;
          const int64_t stride = task.key_stride;
          const __m512 dots = sum_lanes([&](int j) { return partial_dot(q, k + j * stride, D); });
          __m512 s = _mm512_mul_ps(dots, _mm512_set1_ps(task.scaling));
          if (task.mask != nullptr) s = _mm512_add_ps(s, _mm512_loadu_ps(task.mask + start));
          _mm512_storeu_ps(scores + g * T + start, s);
        }
        continue;
      }
    }
#endif
    for (int64_t t = start; t < start + count; ++t) {
      const scalar_t* k = task.key + t * task.key_stride;
      const float bias = task.mask != nullptr ? task.mask[t] : 0.0f;
      for (int64_t g = 0; g < G; ++g) {
        const float* q = query.data() + g * D;
        float dot = 0.0f;
        for (int64_t d = 0; d < D; ++d) dot += q[d] * to_float(k[d]);
        scores[g * T + t] = dot * task.scaling + bias;
      }
    }
  }
}

// scores -> probabilities in place (per query), returning nothing; fully hidden rows give NaN as softmax does.
inline void softmax_rows(float* scores, int64_t groups, int64_t length) {
  for (int64_t g = 0; g < groups; ++g) {
    float* row = scores + g * length;
    float peak = -std::numeric_limits<float>::infinity();
    for (int64_t t = 0; t < length; ++t) peak = std::max(peak, row[t]);
    float total = 0.0f;
    int64_t t = 0;
#if defined(__AVX512F__)
    const __m512 shift = _mm512_set1_ps(peak);
    __m512 sums = _mm512_setzero_ps();
    for (; t + 16 <= length; t += 16) {
      const __m512 e = exp16(_mm512_sub_ps(_mm512_loadu_ps(row + t), shift));
      _mm512_storeu_ps(row + t, e);
      sums = _mm512_add_ps(sums, e);
    }
    total = _mm512_reduce_add_ps(sums);
#endif
    for (; t < length; ++t) {
      row[t] = std::exp(row[t] - peak);
      total += row[t];
    }
    const float inverse = 1.0f / total;
    for (t = 0; t < length; ++t) row[t] *= inverse;
  }
}

#if defined(__AVX512F__)
// 32 values of a head as two float32 vectors: for bf16 the even-indexed values in `low` and the odd-indexed in
// `high` (two instructions, no shuffle); for float32 values 0-15 and 16-31.
inline void load_chunk(const c10::BFloat16* p, __m512& low, __m512& high) {
  const __m512i raw = _mm512_loadu_si512(p);
  low = _mm512_castsi512_ps(_mm512_slli_epi32(raw, 16));
  high = _mm512_castsi512_ps(_mm512_and_si512(raw, _mm512_set1_epi32(static_cast<int>(0xFFFF0000u))));
}
inline void load_chunk(const float* p, __m512& low, __m512& high) {
  low = _mm512_loadu_ps(p);
  high = _mm512_loadu_ps(p + 16);
}
// The inverse of load_chunk's order (the first argument picks the dtype): 32 sums back to the values' own order.
inline void store_chunk(const c10::BFloat16*, float* out, __m512 low, __m512 high) {
  alignas(64) float a[16], b[16];
  _mm512_store_ps(a, low);
  _mm512_store_ps(b, high);
  for (int i = 0; i < 16; ++i) { out[2 * i] = a[i]; out[2 * i + 1] = b[i]; }
}
inline void store_chunk(const float*, float* out, __m512 low, __m512 high) {
  _mm512_storeu_ps(out, low);
  _mm512_storeu_ps(out + 16, high);
}

// out[g, d0 : d0 + 32 kChunks] for groups g0 .. g0 + kGroups, summed in registers over every visible position.
template <int kGroups, int kChunks, typename scalar_t>
void sum_value_tile(const Task<scalar_t>& task, const float* probs, int64_t g0, int64_t d0, float* out) {
  const int64_t T = task.length;
  __m512 acc[kGroups][kChunks][2];
  for (int g = 0; g < kGroups; ++g)
    for (int c = 0; c < kChunks; ++c) acc[g][c][0] = acc[g][c][1] = _mm512_setzero_ps();
  for (int64_t start = 0; start < T; start += kBlock) {
    const int64_t end = std::min(start + kBlock, T);
    if (hidden(task.mask, start, end - start)) continue;
    for (int64_t t = start; t < end; ++t) {
      const scalar_t* v = task.value + t * task.value_stride + d0;
      __m512 row[kChunks][2];
      for (int c = 0; c < kChunks; ++c) load_chunk(v + 32 * c, row[c][0], row[c][1]);
      for (int g = 0; g < kGroups; ++g) {
        const __m512 p = _mm512_set1_ps(probs[(g0 + g) * T + t]);
        for (int c = 0; c < kChunks; ++c) {
          acc[g][c][0] = _mm512_fmadd_ps(p, row[c][0], acc[g][c][0]);
          acc[g][c][1] = _mm512_fmadd_ps(p, row[c][1], acc[g][c][1]);
        }
      }
    }
  }
  for (int g = 0; g < kGroups; ++g)
    for (int c = 0; c < kChunks; ++c)
      store_chunk(task.value, out + (g0 + g) * task.dim + d0 + 32 * c, acc[g][c][0], acc[g][c][1]);
}

template <int kGroups, typename scalar_t>
void sum_value_tiles(const Task<scalar_t>& task, const float* probs, int64_t g0, float* out) {
  int64_t d0 = 0;
  for (; d0 + 64 <= task.dim; d0 += 64) sum_value_tile<kGroups, 2>(task, probs, g0, d0, out);
  if (d0 < task.dim) sum_value_tile<kGroups, 1>(task, probs, g0, d0, out);
}

// out[g] = sum_t probs[g * T + t] * v_t with every sum held in registers (groups in tiles of up to 4, head values
// in tiles of 64, then 32), skipping hidden blocks. Needs D % 32 == 0.
template <typename scalar_t>
void sum_values_in_registers(const Task<scalar_t>& task, const float* probs) {
  std::vector<float> out(task.groups * task.dim);
  for (int64_t g0 = 0; g0 < task.groups; g0 += 4) {
    switch (std::min<int64_t>(4, task.groups - g0)) {
      case 1: sum_value_tiles<1>(task, probs, g0, out.data()); break;
      case 2: sum_value_tiles<2>(task, probs, g0, out.data()); break;
      case 3: sum_value_tiles<3>(task, probs, g0, out.data()); break;
      default: sum_value_tiles<4>(task, probs, g0, out.data()); break;
    }
  }
  for (int64_t i = 0; i < task.groups * task.dim; ++i) task.out[i] = static_cast<scalar_t>(out[i]);
}
#endif

// out[g] = sum_t probs[g * T + t] * v_t, skipping hidden blocks: in registers where the head's width allows,
// else with the sums in memory. Both add the same products in the same order, so they give the same results.
template <typename scalar_t>
void sum_values(const Task<scalar_t>& task, const float* probs) {
#if defined(__AVX512F__)
  if (task.dim % 32 == 0) return sum_values_in_registers(task, probs);
#endif
  const int64_t G = task.groups, D = task.dim, T = task.length;
  std::vector<float> out(G * D, 0.0f);
  for (int64_t start = 0; start < T; start += kBlock) {
    const int64_t count = std::min(kBlock, T - start);
    if (hidden(task.mask, start, count)) continue;
    for (int64_t t = start; t < start + count; ++t) {
      const scalar_t* v = task.value + t * task.value_stride;
      int64_t d = 0;
#if defined(__AVX512F__)
      for (; d + 16 <= D; d += 16) {
        const __m512 row = load16(v + d);
        for (int64_t g = 0; g < G; ++g) {
          float* o = out.data() + g * D + d;
          _mm512_storeu_ps(o, _mm512_fmadd_ps(_mm512_set1_ps(probs[g * T + t]), row, _mm512_loadu_ps(o)));
        }
      }
#endif
      for (; d < D; ++d) {
        const float x = to_float(v[d]);
        for (int64_t g = 0; g < G; ++g) out[g * D + d] += probs[g * T + t] * x;
      }
    }
  }
  for (int64_t i = 0; i < G * D; ++i) task.out[i] = static_cast<scalar_t>(out[i]);
}

template <typename scalar_t>
void run(const torch::Tensor& query, const torch::Tensor& key, const torch::Tensor& value, const torch::Tensor& mask,
         double scaling, torch::Tensor& out) {
  const int64_t B = query.size(0), H = query.size(1), G = query.size(2), D = query.size(3), T = key.size(2);
  const bool masked = mask.numel() > 0;
  const int64_t mask_row_stride = masked && mask.size(0) > 1 ? mask.stride(0) : 0;
  const scalar_t* q = query.data_ptr<scalar_t>();
  const scalar_t* k = key.data_ptr<scalar_t>();
  const scalar_t* v = value.data_ptr<scalar_t>();
  const float* m = masked ? mask.data_ptr<float>() : nullptr;
  scalar_t* o = out.data_ptr<scalar_t>();
  at::parallel_for(0, B * H, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> scores(G * T);
    for (int64_t index = begin; index < end; ++index) {
      const int64_t b = index / H, h = index % H;
      const Task<scalar_t> task{q + (b * H + h) * G * D,
                                k + b * key.stride(0) + h * key.stride(1),
                                v + b * value.stride(0) + h * value.stride(1),
                                m != nullptr ? m + b * mask_row_stride : nullptr,
                                o + (b * H + h) * G * D,
                                G, D, T, key.stride(2), value.stride(2), static_cast<float>(scaling)};
      score_keys(task, scores.data());
      softmax_rows(scores.data(), G, T);
      sum_values(task, scores.data());
    }
  });
}

}  // namespace

torch::Tensor decode_attention(torch::Tensor query, torch::Tensor key, torch::Tensor value, torch::Tensor mask,
                               double scaling) {
  TORCH_CHECK(query.dim() == 4 && key.dim() == 4 && value.dim() == 4, "query, key and value must be 4-d");
  TORCH_CHECK(key.sizes() == value.sizes(), "key and value must have the same shape");
  TORCH_CHECK(query.size(0) == key.size(0) && query.size(1) == key.size(1) && query.size(3) == key.size(3),
              "query [B, Hkv, G, D] does not match key [B, Hkv, T, D]");
  TORCH_CHECK(key.stride(3) == 1 && value.stride(3) == 1, "key and value need contiguous head dimensions");
  TORCH_CHECK(query.scalar_type() == key.scalar_type() && key.scalar_type() == value.scalar_type(),
              "query, key and value must share a dtype");
  TORCH_CHECK(mask.numel() == 0 || (mask.dim() == 2 && mask.scalar_type() == at::kFloat && mask.stride(1) == 1 &&
                                    mask.size(1) == key.size(2) && (mask.size(0) == 1 || mask.size(0) == key.size(0))),
              "mask must be float32 [B or 1, T] with contiguous positions, or empty");
  query = query.contiguous();
  auto out = torch::empty_like(query);
  if (query.scalar_type() == at::kBFloat16) {
    run<c10::BFloat16>(query, key, value, mask, scaling, out);
  } else {
    TORCH_CHECK(query.scalar_type() == at::kFloat, "decode_attention handles bfloat16 and float32");
    run<float>(query, key, value, mask, scaling, out);
  }
  return out;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("decode_attention", &decode_attention, "one-token grouped-query attention over a KV cache (CPU)");
}
