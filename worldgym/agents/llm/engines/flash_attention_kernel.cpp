// Attention over many query tokens on CPU (training passes and prefill), bf16 in and out: forward and backward.
//
// forward(query [B, H, T, D], key/value [B, Hkv, S, D] (any strides but the last), mask, causal, scaling)
//   -> (out [B, T, H, D] bf16, lse [B, H, T] float32)
// backward(grad_out [B, T, H, D], query, key, value, out, lse, mask, causal, scaling)
//   -> (grad_query [B, H, T, D], grad_key [B, Hkv, S, D], grad_value [B, Hkv, S, D]), all bf16
//
// mask: bool [B or 1, 1, T, S] (true = attend) or empty. causal: query t sees keys up to t + S - T (the queries
// are the last T of the S positions). A query that sees no key gets a zero output and zero gradients.
//
// A flash-attention scheme: each task takes one KV head and a block of queries of every head of its group, scores
// them against blocks of keys, keeps a running softmax in float32 and sums the values, so no [T, S] matrix is
// ever stored; blocks the causal rule or the mask hide entirely (padding) are skipped. The products are small
// matrix products whose operands are bf16 and whose sums are float32: with AVX512-BF16 they use its dot-product
// instruction on tiles of 8 rows x 32 columns (the right operand packed in pairs of rows, as the instruction reads
// it); elsewhere plain loops. Each task sums in a fixed order, so results do not depend on the number of threads.

#include <torch/extension.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <tuple>
#include <vector>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#include "vector_math.h"

namespace {

using bf16 = c10::BFloat16;
constexpr int64_t kQueryBlock = 64;  // query positions of each head per task
constexpr int64_t kKeyBlock = 128;   // key positions per block
constexpr int64_t kTileRows = 8;
constexpr int64_t kTileCols = 32;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

inline int64_t round_up(int64_t x, int64_t multiple) { return (x + multiple - 1) / multiple * multiple; }

// ---------------------------------------------------------------------------------------------------------------
// C[M, N] = (add ? C : 0) + A[M, K] B[K, N]. A: bf16, row-major (row stride lda, K even). B: packed in pairs of
// rows, element (k, n) at B[(k / 2) * ldb * 2 + n * 2 + k % 2] (ldb >= N). N is a multiple of kTileCols.

#if defined(__AVX512BF16__)
template <int R>
inline void tile(const bf16* A, int64_t lda, const bf16* B, int64_t ldb, int64_t pairs, float* C, int64_t ldc,
                 bool add) {
  __m512 acc[R][2];
  for (int r = 0; r < R; ++r) {
    acc[r][0] = add ? _mm512_loadu_ps(C + r * ldc) : _mm512_setzero_ps();
    acc[r][1] = add ? _mm512_loadu_ps(C + r * ldc + 16) : _mm512_setzero_ps();
  }
  for (int64_t k = 0; k < pairs; ++k) {
    const __m512bh b0 = (__m512bh)_mm512_loadu_si512(B + k * ldb * 2);
    const __m512bh b1 = (__m512bh)_mm512_loadu_si512(B + k * ldb * 2 + 32);
    for (int r = 0; r < R; ++r) {
      int32_t pair;
      std::memcpy(&pair, A + r * lda + 2 * k, sizeof(pair));
      const __m512bh a = (__m512bh)_mm512_set1_epi32(pair);
      acc[r][0] = _mm512_dpbf16_ps(acc[r][0], a, b0);
      acc[r][1] = _mm512_dpbf16_ps(acc[r][1], a, b1);
    }
  }
  for (int r = 0; r < R; ++r) {
    _mm512_storeu_ps(C + r * ldc, acc[r][0]);
    _mm512_storeu_ps(C + r * ldc + 16, acc[r][1]);
  }
}
#else
template <int R>
inline void tile(const bf16* A, int64_t lda, const bf16* B, int64_t ldb, int64_t pairs, float* C, int64_t ldc,
                 bool add) {
  for (int r = 0; r < R; ++r) {
    float acc[kTileCols];
    for (int64_t n = 0; n < kTileCols; ++n) acc[n] = add ? C[r * ldc + n] : 0.0f;
    for (int64_t k = 0; k < pairs; ++k) {
      const float a0 = static_cast<float>(A[r * lda + 2 * k]), a1 = static_cast<float>(A[r * lda + 2 * k + 1]);
      const bf16* b = B + k * ldb * 2;
      for (int64_t n = 0; n < kTileCols; ++n)
        acc[n] += a0 * static_cast<float>(b[2 * n]) + a1 * static_cast<float>(b[2 * n + 1]);
    }
    for (int64_t n = 0; n < kTileCols; ++n) C[r * ldc + n] = acc[n];
  }
}
#endif

void gemm(int64_t M, int64_t N, int64_t K, const bf16* A, int64_t lda, const bf16* B, int64_t ldb, float* C,
          int64_t ldc, bool add) {
  const int64_t pairs = K / 2;
  for (int64_t n = 0; n < N; n += kTileCols) {
    for (int64_t m = 0; m < M; m += kTileRows) {
      const bf16* a = A + m * lda;
      const bf16* b = B + n * 2;
      float* c = C + m * ldc + n;
      switch (std::min(kTileRows, M - m)) {
        case 8: tile<8>(a, lda, b, ldb, pairs, c, ldc, add); break;
        case 7: tile<7>(a, lda, b, ldb, pairs, c, ldc, add); break;
        case 6: tile<6>(a, lda, b, ldb, pairs, c, ldc, add); break;
        case 5: tile<5>(a, lda, b, ldb, pairs, c, ldc, add); break;
        case 4: tile<4>(a, lda, b, ldb, pairs, c, ldc, add); break;
        case 3: tile<3>(a, lda, b, ldb, pairs, c, ldc, add); break;
        case 2: tile<2>(a, lda, b, ldb, pairs, c, ldc, add); break;
        default: tile<1>(a, lda, b, ldb, pairs, c, ldc, add); break;
      }
    }
  }
}

// B = src^T packed (K = D along the pairs, N = rows): src has `rows` rows of D values, `stride` apart; columns
// from `rows` to `ldb` are zero.
void pack_transposed(const bf16* src, int64_t rows, int64_t stride, int64_t D, bf16* dst, int64_t ldb) {
  std::fill(dst, dst + D * ldb, bf16(0.0f));
  for (int64_t n = 0; n < rows; ++n)
    for (int64_t d = 0; d < D; ++d) dst[(d / 2) * ldb * 2 + n * 2 + d % 2] = src[n * stride + d];
}

// B = src packed (K = rows along the pairs, N = D): rows beyond `rows` (up to `padded`, even) are zero.
void pack_rows(const bf16* src, int64_t rows, int64_t stride, int64_t D, int64_t padded, bf16* dst) {
  std::fill(dst, dst + padded * D, bf16(0.0f));
  for (int64_t n = 0; n < rows; ++n)
    for (int64_t d = 0; d < D; ++d) dst[(n / 2) * D * 2 + d * 2 + n % 2] = src[n * stride + d];
}

// dst [C x ld] = src^T for an R x C block src (columns of dst from R to ld are zero).
void transpose(const bf16* src, int64_t R, int64_t C, bf16* dst, int64_t ld) {
  std::fill(dst, dst + C * ld, bf16(0.0f));
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < C; ++c) dst[c * ld + r] = src[r * C + c];
}

// Rows 2i and 2i + 1 of src [rows x C] (rows even) interleaved into row pair i of dst: the packed right operand
// of a product whose sum runs over src's rows (dst[(r / 2) * C * 2 + c * 2 + r % 2] = src[r, c]).
void pack_row_pairs(const bf16* src, int64_t rows, int64_t C, bf16* dst) {
  for (int64_t r = 0; r < rows; r += 2) {
    const bf16* a = src + r * C;
    const bf16* b = a + C;
    bf16* out = dst + r * C;
    int64_t c = 0;
#if defined(__AVX512F__)
    for (; c + 16 <= C; c += 16) {
      const __m512i low = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + c)));
      const __m512i high = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + c)));
      _mm512_storeu_si512(out + 2 * c, _mm512_or_si512(low, _mm512_slli_epi32(high, 16)));
    }
#endif
    for (; c < C; ++c) {
      out[2 * c] = a[c];
      out[2 * c + 1] = b[c];
    }
  }
}


// row[j] = exp(row[j] - shift) for j < count (0 where row[j] is -inf); returns their sum.
inline float exp_shifted(float* row, int64_t count, float shift) {
  int64_t j = 0;
  float total = 0.0f;
#if defined(__AVX512F__)
  const __m512 s = _mm512_set1_ps(shift), minus_inf = _mm512_set1_ps(kNegInf);
  __m512 sums = _mm512_setzero_ps();
  for (; j + 16 <= count; j += 16) {
    const __m512 x = _mm512_loadu_ps(row + j);
    const __m512 e = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x, minus_inf, _CMP_NEQ_OQ), exp16(_mm512_sub_ps(x, s)));
    _mm512_storeu_ps(row + j, e);
    sums = _mm512_add_ps(sums, e);
  }
  total = _mm512_reduce_add_ps(sums);
#endif
  for (; j < count; ++j) {
    row[j] = row[j] == kNegInf ? 0.0f : std::exp(row[j] - shift);
    total += row[j];
  }
  return total;
}

// dst[j] = bf16(src[j] * scale) for j < count (round to nearest even).
inline void to_bf16(const float* src, float scale, int64_t count, bf16* dst) {
  int64_t j = 0;
#if defined(__AVX512BF16__)
  const __m512 factor = _mm512_set1_ps(scale);
  for (; j + 16 <= count; j += 16) {
    const __m256bh packed = _mm512_cvtneps_pbh(_mm512_mul_ps(_mm512_loadu_ps(src + j), factor));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + j), (__m256i)packed);
  }
#endif
  for (; j < count; ++j) dst[j] = bf16(src[j] * scale);
}

inline float max_of(const float* row, int64_t count) {
  int64_t j = 0;
  float peak = kNegInf;
#if defined(__AVX512F__)
  __m512 peaks = _mm512_set1_ps(kNegInf);
  for (; j + 16 <= count; j += 16) peaks = _mm512_max_ps(peaks, _mm512_loadu_ps(row + j));
  peak = _mm512_reduce_max_ps(peaks);
#endif
  for (; j < count; ++j) peak = std::max(peak, row[j]);
  return peak;
}

// ---------------------------------------------------------------------------------------------------------------

struct Shape {
  int64_t B, H, Hkv, G, T, S, D, padded_keys;
  bool causal;
  float scaling;
  const bool* mask;  // [B or 1, 1, T, S] or nullptr
  int64_t mask_batch_stride, mask_query_stride;
};

Shape shape_of(const torch::Tensor& query, const torch::Tensor& key, const torch::Tensor& mask, bool causal,
               double scaling) {
  Shape s{};
  s.B = query.size(0);
  s.H = query.size(1);
  s.T = query.size(2);
  s.D = query.size(3);
  s.Hkv = key.size(1);
  s.G = s.H / s.Hkv;
  s.S = key.size(2);
  s.padded_keys = round_up(s.S, kKeyBlock);
  s.causal = causal;
  s.scaling = static_cast<float>(scaling);
  s.mask = mask.numel() > 0 ? mask.data_ptr<bool>() : nullptr;
  s.mask_batch_stride = mask.numel() > 0 && mask.size(0) > 1 ? mask.stride(0) : 0;
  s.mask_query_stride = mask.numel() > 0 ? mask.stride(2) : 0;
  return s;
}

// The keys query t of batch row b may see in [start, start + kKeyBlock): scores of hidden ones set to -inf.
// Returns whether the query sees any key at all in that block.
inline bool hide_keys(const Shape& s, int64_t b, int64_t t, int64_t start, float* scores) {
  const int64_t limit = std::min(s.S, s.causal ? t + s.S - s.T + 1 : s.S);  // keys [0, limit) may be seen
  const int64_t visible = std::clamp<int64_t>(limit - start, 0, kKeyBlock);
  std::fill(scores + visible, scores + kKeyBlock, kNegInf);
  if (s.mask == nullptr) return visible > 0;
  const bool* row = s.mask + b * s.mask_batch_stride + t * s.mask_query_stride + start;
  bool any = false;
  int64_t j = 0;
#if defined(__AVX512BW__) && defined(__AVX512VL__)
  const __m512 minus_inf = _mm512_set1_ps(kNegInf);
  for (; j + 16 <= visible; j += 16) {
    const __m128i flags = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + j));
    const __mmask16 seen = _mm_test_epi8_mask(flags, flags);
    any = any || seen != 0;
    _mm512_mask_storeu_ps(scores + j, static_cast<__mmask16>(~seen), minus_inf);
  }
#endif
  for (; j < visible; ++j) {
    if (row[j]) {
      any = true;
    } else {
      scores[j] = kNegInf;
    }
  }
  return any;
}

// Whether the mask hides keys [start, start + kKeyBlock) from every query of [t0, t0 + count) (without a mask:
// never), so that a block of padding costs no products.
inline bool block_hidden(const Shape& s, int64_t b, int64_t t0, int64_t count, int64_t start) {
  if (s.mask == nullptr) return false;
  const int64_t width = std::min(kKeyBlock, s.S - start);
  for (int64_t t = t0; t < t0 + count; ++t) {
    const bool* row = s.mask + b * s.mask_batch_stride + t * s.mask_query_stride + start;
    if (std::memchr(row, 1, width) != nullptr) return false;
  }
  return true;
}

// The last key position any query of [first, first + count) may see under the causal rule (S - 1 without it).
inline int64_t last_key(const Shape& s, int64_t first, int64_t count) {
  return s.causal ? std::min(s.S - 1, first + count - 1 + s.S - s.T) : s.S - 1;
}

// Per (batch row, KV head): the keys transposed (for scores) and the values in row pairs (for their sums).
struct PackedHead {
  std::vector<bf16> keys_t, values;
};

PackedHead pack_head(const Shape& s, const bf16* key, int64_t key_stride, const bf16* value, int64_t value_stride) {
  PackedHead p;
  p.keys_t.resize(s.D * s.padded_keys);
  p.values.resize(s.padded_keys * s.D);
  pack_transposed(key, s.S, key_stride, s.D, p.keys_t.data(), s.padded_keys);
  pack_rows(value, s.S, value_stride, s.D, s.padded_keys, p.values.data());
  return p;
}

// Copies query rows of every head of KV head h, positions [t0, t0 + count), into rows (g * count + i) of dst
// [rows x D] (rows beyond G * count stay zero).
void gather_queries(const Shape& s, const bf16* base, int64_t head_stride, int64_t position_stride, int64_t h,
                    int64_t t0, int64_t count, bf16* dst) {
  for (int64_t g = 0; g < s.G; ++g)
    for (int64_t i = 0; i < count; ++i)
      std::memcpy(dst + (g * count + i) * s.D, base + (h * s.G + g) * head_stride + (t0 + i) * position_stride,
                  s.D * sizeof(bf16));
}

void forward_task(const Shape& s, const PackedHead& packed, const torch::Tensor& query, int64_t b, int64_t h,
                  int64_t t0, bf16* out, float* lse) {
  const int64_t count = std::min(kQueryBlock, s.T - t0), R = s.G * count, D = s.D;
  std::vector<bf16> queries(R * D), probs(R * kKeyBlock);
  std::vector<float> scores(R * kKeyBlock), acc(R * D, 0.0f), peak(R, kNegInf), total(R, 0.0f);
  gather_queries(s, query.data_ptr<bf16>() + b * query.stride(0), query.stride(1), query.stride(2), h, t0, count,
                 queries.data());
  const int64_t end = last_key(s, t0, count);
  for (int64_t start = 0; start <= end; start += kKeyBlock) {
    if (block_hidden(s, b, t0, count, start)) continue;
    gemm(R, kKeyBlock, D, queries.data(), D, packed.keys_t.data() + start * 2, s.padded_keys, scores.data(),
         kKeyBlock, false);
    for (int64_t r = 0; r < R; ++r) {
      float* row = scores.data() + r * kKeyBlock;
      bf16* prob = probs.data() + r * kKeyBlock;
      for (int64_t j = 0; j < kKeyBlock; ++j) row[j] *= s.scaling;
      if (!hide_keys(s, b, t0 + r % count, start, row)) {
        std::fill(prob, prob + kKeyBlock, bf16(0.0f));
        continue;
      }
      const float new_peak = std::max(peak[r], max_of(row, kKeyBlock));
      const float rescale = std::exp(peak[r] - new_peak);  // 0 while nothing was seen
      total[r] = total[r] * rescale + exp_shifted(row, kKeyBlock, new_peak);
      peak[r] = new_peak;
      float* o = acc.data() + r * D;
      for (int64_t d = 0; d < D; ++d) o[d] *= rescale;
      to_bf16(row, 1.0f, kKeyBlock, prob);
    }
    gemm(R, D, kKeyBlock, probs.data(), kKeyBlock, packed.values.data() + (start / 2) * D * 2, D, acc.data(), D,
         true);
  }
  for (int64_t r = 0; r < R; ++r) {
    const int64_t g = r / count, t = t0 + r % count, head = h * s.G + g;
    const float inverse = total[r] > 0.0f ? 1.0f / total[r] : 0.0f;
    bf16* o = out + ((b * s.T + t) * s.H + head) * D;
    for (int64_t d = 0; d < D; ++d) o[d] = bf16(acc[r * D + d] * inverse);
    lse[(b * s.H + head) * s.T + t] =
        total[r] > 0.0f ? peak[r] + std::log(total[r]) : std::numeric_limits<float>::infinity();
  }
}

void backward_head(const Shape& s, const torch::Tensor& grad_out, const torch::Tensor& query,
                   const torch::Tensor& key, const torch::Tensor& value, const torch::Tensor& out,
                   const float* lse, int64_t b, int64_t h, bf16* grad_query, bf16* grad_key, bf16* grad_value) {
  const int64_t D = s.D, P = s.padded_keys;
  const bf16* k = key.data_ptr<bf16>() + b * key.stride(0) + h * key.stride(1);
  const bf16* v = value.data_ptr<bf16>() + b * value.stride(0) + h * value.stride(1);
  std::vector<bf16> keys_t(D * P), values_t(D * P), keys(P * D);
  pack_transposed(k, s.S, key.stride(2), D, keys_t.data(), P);
  pack_transposed(v, s.S, value.stride(2), D, values_t.data(), P);
  pack_rows(k, s.S, key.stride(2), D, P, keys.data());
  // dK and dV are summed transposed ([D x P]): as dK^T = Q^T dS and dV^T = dO^T P their right operands are the
  // block's dS and P in row pairs, packed without a transpose per block
  std::vector<float> grad_k_t(D * P, 0.0f), grad_v_t(D * P, 0.0f);
  const int64_t rows_max = round_up(s.G * kQueryBlock, 2);
  std::vector<bf16> queries(rows_max * D), queries_t(D * rows_max), grads(rows_max * D), grads_t(D * rows_max);
  std::vector<bf16> probs(rows_max * kKeyBlock), probs_pairs(rows_max * kKeyBlock), dscores(rows_max * kKeyBlock),
      dscores_pairs(rows_max * kKeyBlock);
  std::vector<float> scores(rows_max * kKeyBlock), dprobs(rows_max * kKeyBlock), delta(rows_max), row_lse(rows_max),
      grad_q(rows_max * D);
  const bf16* o_base = out.data_ptr<bf16>();
  for (int64_t t0 = 0; t0 < s.T; t0 += kQueryBlock) {
    const int64_t count = std::min(kQueryBlock, s.T - t0), R = s.G * count, padded = round_up(R, 2);
    std::fill(queries.begin(), queries.end(), bf16(0.0f));
    std::fill(grads.begin(), grads.end(), bf16(0.0f));
    std::fill(probs.begin(), probs.end(), bf16(0.0f));  // an odd R leaves a zero row to pair with
    std::fill(dscores.begin(), dscores.end(), bf16(0.0f));
    gather_queries(s, query.data_ptr<bf16>() + b * query.stride(0), query.stride(1), query.stride(2), h, t0, count,
                   queries.data());
    // grad_out and out are [B, T, H, D]: head stride (the 3rd dim), position stride (the 2nd)
    gather_queries(s, grad_out.data_ptr<bf16>() + b * grad_out.stride(0), grad_out.stride(2), grad_out.stride(1), h,
                   t0, count, grads.data());
    transpose(queries.data(), padded, D, queries_t.data(), padded);
    transpose(grads.data(), padded, D, grads_t.data(), padded);
    for (int64_t r = 0; r < R; ++r) {
      const int64_t head = h * s.G + r / count, t = t0 + r % count;
      const bf16* o = o_base + ((b * s.T + t) * s.H + head) * D;
      float dot = 0.0f;
      for (int64_t d = 0; d < D; ++d) dot += static_cast<float>(grads[r * D + d]) * static_cast<float>(o[d]);
      delta[r] = dot;
      row_lse[r] = lse[(b * s.H + head) * s.T + t];
    }
    std::fill(grad_q.begin(), grad_q.end(), 0.0f);
    const int64_t end = last_key(s, t0, count);
    for (int64_t start = 0; start <= end; start += kKeyBlock) {
      if (block_hidden(s, b, t0, count, start)) continue;
      gemm(R, kKeyBlock, D, queries.data(), D, keys_t.data() + start * 2, P, scores.data(), kKeyBlock, false);
      gemm(R, kKeyBlock, D, grads.data(), D, values_t.data() + start * 2, P, dprobs.data(), kKeyBlock, false);
      for (int64_t r = 0; r < R; ++r) {
        float* row = scores.data() + r * kKeyBlock;
        for (int64_t j = 0; j < kKeyBlock; ++j) row[j] *= s.scaling;
        const bool seen = hide_keys(s, b, t0 + r % count, start, row);
        if (seen && std::isfinite(row_lse[r])) {
          exp_shifted(row, kKeyBlock, row_lse[r]);
        } else {
          std::fill(row, row + kKeyBlock, 0.0f);
        }
        to_bf16(row, 1.0f, kKeyBlock, probs.data() + r * kKeyBlock);
        float* ds = dprobs.data() + r * kKeyBlock;  // dS = P * (dP - delta), scaled as the scores were
        for (int64_t j = 0; j < kKeyBlock; ++j) ds[j] = row[j] * (ds[j] - delta[r]);
        to_bf16(ds, s.scaling, kKeyBlock, dscores.data() + r * kKeyBlock);
      }
      pack_row_pairs(probs.data(), padded, kKeyBlock, probs_pairs.data());
      pack_row_pairs(dscores.data(), padded, kKeyBlock, dscores_pairs.data());
      gemm(D, kKeyBlock, padded, grads_t.data(), padded, probs_pairs.data(), kKeyBlock, grad_v_t.data() + start, P,
           true);
      gemm(D, kKeyBlock, padded, queries_t.data(), padded, dscores_pairs.data(), kKeyBlock, grad_k_t.data() + start,
           P, true);
      gemm(R, D, kKeyBlock, dscores.data(), kKeyBlock, keys.data() + (start / 2) * D * 2, D, grad_q.data(), D, true);
    }
    for (int64_t r = 0; r < R; ++r) {
      const int64_t head = h * s.G + r / count, t = t0 + r % count;
      bf16* dq = grad_query + ((b * s.H + head) * s.T + t) * D;
      for (int64_t d = 0; d < D; ++d) dq[d] = bf16(grad_q[r * D + d]);
    }
  }
  bf16* dk = grad_key + (b * s.Hkv + h) * s.S * D;
  bf16* dv = grad_value + (b * s.Hkv + h) * s.S * D;
  for (int64_t n = 0; n < s.S; ++n) {
    for (int64_t d = 0; d < D; ++d) {
      dk[n * D + d] = bf16(grad_k_t[d * P + n]);
      dv[n * D + d] = bf16(grad_v_t[d * P + n]);
    }
  }
}

void check_inputs(const torch::Tensor& query, const torch::Tensor& key, const torch::Tensor& value,
                  const torch::Tensor& mask) {
  TORCH_CHECK(query.dim() == 4 && key.dim() == 4 && value.dim() == 4, "query, key and value must be 4-d");
  TORCH_CHECK(query.scalar_type() == at::kBFloat16 && key.scalar_type() == at::kBFloat16 &&
                  value.scalar_type() == at::kBFloat16,
              "the flash attention kernel takes bfloat16 query, key and value");
  TORCH_CHECK(key.sizes() == value.sizes(), "key and value must have the same shape");
  TORCH_CHECK(query.size(0) == key.size(0) && query.size(3) == key.size(3),
              "query [B, H, T, D] does not match key [B, Hkv, S, D]");
  TORCH_CHECK(query.size(1) % key.size(1) == 0, "query heads must be a multiple of key heads");
  TORCH_CHECK(query.size(3) % kTileCols == 0, "the head dimension must be a multiple of 32");
  TORCH_CHECK(query.size(2) <= key.size(2), "more queries than keys");
  TORCH_CHECK(query.stride(3) == 1 && key.stride(3) == 1 && value.stride(3) == 1,
              "query, key and value need contiguous head dimensions");
  TORCH_CHECK(mask.numel() == 0 ||
                  (mask.dim() == 4 && mask.scalar_type() == at::kBool && mask.stride(3) == 1 && mask.size(1) == 1 &&
                   mask.size(2) == query.size(2) && mask.size(3) == key.size(2) &&
                   (mask.size(0) == 1 || mask.size(0) == query.size(0))),
              "mask must be bool [B or 1, 1, T, S] with contiguous key positions, or empty");
}

}  // namespace

std::tuple<torch::Tensor, torch::Tensor> forward(torch::Tensor query, torch::Tensor key, torch::Tensor value,
                                                 torch::Tensor mask, bool causal, double scaling) {
  check_inputs(query, key, value, mask);
  const Shape s = shape_of(query, key, mask, causal, scaling);
  auto out = torch::zeros({s.B, s.T, s.H, s.D}, query.options());
  auto lse = torch::empty({s.B, s.H, s.T}, query.options().dtype(at::kFloat));
  std::vector<PackedHead> packed(s.B * s.Hkv);
  at::parallel_for(0, s.B * s.Hkv, 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const int64_t b = i / s.Hkv, h = i % s.Hkv;
      packed[i] = pack_head(s, key.data_ptr<bf16>() + b * key.stride(0) + h * key.stride(1), key.stride(2),
                            value.data_ptr<bf16>() + b * value.stride(0) + h * value.stride(1), value.stride(2));
    }
  });
  const int64_t blocks = (s.T + kQueryBlock - 1) / kQueryBlock;
  at::parallel_for(0, s.B * s.Hkv * blocks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const int64_t head = i / blocks, b = head / s.Hkv, h = head % s.Hkv;
      forward_task(s, packed[head], query, b, h, (i % blocks) * kQueryBlock, out.data_ptr<bf16>(),
                   lse.data_ptr<float>());
    }
  });
  return {out, lse};
}

std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> backward(torch::Tensor grad_out, torch::Tensor query,
                                                                 torch::Tensor key, torch::Tensor value,
                                                                 torch::Tensor out, torch::Tensor lse,
                                                                 torch::Tensor mask, bool causal, double scaling) {
  check_inputs(query, key, value, mask);
  const Shape s = shape_of(query, key, mask, causal, scaling);
  TORCH_CHECK(grad_out.scalar_type() == at::kBFloat16 && grad_out.sizes() == out.sizes() &&
                  out.sizes() == torch::IntArrayRef({s.B, s.T, s.H, s.D}) && grad_out.stride(3) == 1,
              "grad_out and out must be bfloat16 [B, T, H, D] with contiguous head dimensions");
  TORCH_CHECK(lse.scalar_type() == at::kFloat && lse.is_contiguous() &&
                  lse.sizes() == torch::IntArrayRef({s.B, s.H, s.T}),
              "lse must be contiguous float32 [B, H, T]");
  out = out.contiguous();
  auto grad_query = torch::empty({s.B, s.H, s.T, s.D}, query.options());
  auto grad_key = torch::empty({s.B, s.Hkv, s.S, s.D}, key.options());
  auto grad_value = torch::empty({s.B, s.Hkv, s.S, s.D}, value.options());
  at::parallel_for(0, s.B * s.Hkv, 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i)
      backward_head(s, grad_out, query, key, value, out, lse.data_ptr<float>(), i / s.Hkv, i % s.Hkv,
                    grad_query.data_ptr<bf16>(), grad_key.data_ptr<bf16>(), grad_value.data_ptr<bf16>());
  });
  return {grad_query, grad_key, grad_value};
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("forward", &forward, "grouped-query attention over many query tokens, bf16 (CPU): (out, lse)");
  m.def("backward", &backward, "its gradients with respect to query, key and value");
}
