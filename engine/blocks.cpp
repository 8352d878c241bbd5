// The GGUF file's own blocks times float32 activations, on a CPU with AVX2 and FMA: engine/blocks.py builds and
// loads this file (torch.utils.cpp_extension), engine/llama.py's "q4_1" format calls it.
//
//   blocks_mm(x (M, K) float32, qs, d, m) -> y (M, N) float32, y = x @ W.T with W as the file stores it:
//     Q4_1: qs (N, K/2) uint8, a block's 16 bytes as in the file (weight j of a block of 32 is the low nibble of
//           byte j for j < 16, the high nibble of byte j - 16 after); d (N, K/32) float32; m (N, B8) float32, its
//           K/32 blocks then zeros up to a multiple of 8 (B8): w = d q + m (ggml's dequantize_row_q4_1)
//     Q8_0: qs (N, K) int8 as uint8; d (N, K/32) float32; m empty: w = d q
//   attend_rows(q, k, v, scale): attention of the newest tokens, each alone (below)
//
// Why a kernel of our own: torch's weight-only kernels dequantize a tile of weights for every 4 rows of
// activations, so a (K+1)-token verification costs about (K+1)/4 one-token steps, and they round the scales and the
// activations to bfloat16. Here a block of weights is unpacked once per call and multiplied by every row:
// a wider forward adds only each row's own multiply-adds, and the weights are the file's, exactly.
//
// Rows equal by construction: every row of x goes through the same instructions in the same order, whatever M is
// and wherever the row sits (rows are taken up to 16 at a time, each with accumulators of its own; no arithmetic
// mixes rows). So a row of a (K+1)-token forward is bit for bit the one-token step's (tests/test_blocks.py).
// Compiled without -ffast-math: the compiler may not reorder a sum.
//
// What it leaves out: other block types (Q4_0, K-quants), other instruction sets (a CPU without AVX2 keeps torch's
// int4 kernel: engine/blocks.py says why), and the 8-bit activations that llama.cpp multiplies by (faster, coarser).

#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace {

constexpr int64_t BLOCK = 32;  // weights per block, Q4_1 and Q8_0 alike
constexpr int ROWS = 16;       // rows of x per unpacked block: past 8 or so the accumulators spill from AVX2's 16
                               // registers to the stack, still cheaper than unpacking the block again for row 9

inline float lanes_sum(__m256 v) {  // the 8 lanes' sum, always in the same order: (0+4, 1+5, 2+6, 3+7), then pairs
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

inline void q4_1_block(const uint8_t* qs, __m256 q[4]) {  // 16 bytes -> the block's 32 q (0..15) as floats, in order
  const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m128i low = _mm_and_si128(raw, _mm_set1_epi8(0x0F));                       // weights 0..15
  const __m128i high = _mm_and_si128(_mm_srli_epi16(raw, 4), _mm_set1_epi8(0x0F));  // weights 16..31
  q[0] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(low));
  q[1] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(low, 8)));
  q[2] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(high));
  q[3] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(high, 8)));
}

inline void q8_0_block(const uint8_t* qs, __m256 q[4]) {  // 32 bytes -> the block's 32 q (-127..127) as floats
  for (int i = 0; i < 4; i++)
    q[i] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(qs + 8 * i))));
}

// R rows of x (row r at x + r K, its block sums at xsum + r B) times output rows n0..n1 of W -> y (row r at y + r ldy).
// Per output row and block: t = sum_j q_j x_j in 8 lanes (one multiply, three multiply-adds), acc += d t. Q4_1's m
// multiplies the block's sum of x (w = d q + m: sum_j w_j x_j = d sum_j q_j x_j + m sum_j x_j), summed over the
// blocks after them, 8 blocks at a time (offsets): mB (N, B8) holds each output row's m, zero past its B blocks.
template <int R, bool Q4_1>
void rows_times_block_rows(const float* x, const float* xsum, int64_t K, const uint8_t* qs, const float* scales,
                           const float* mB, float* y, int64_t ldy, int64_t n0, int64_t n1) {
  const int64_t B = K / BLOCK, B8 = (B + 7) / 8 * 8;
  const int64_t bytes = Q4_1 ? BLOCK / 2 : BLOCK;  // a block's bytes of q
  for (int64_t n = n0; n < n1; n++) {
    __m256 acc[R];
    for (int r = 0; r < R; r++) acc[r] = _mm256_setzero_ps();
    for (int64_t b = 0; b < B; b++) {
      __m256 q[4];
      const int64_t block = n * B + b;
      if (Q4_1) q4_1_block(qs + block * bytes, q); else q8_0_block(qs + block * bytes, q);
      const __m256 d = _mm256_set1_ps(scales[block]);
      for (int r = 0; r < R; r++) {
        const float* xb = x + r * K + b * BLOCK;
        __m256 t = _mm256_mul_ps(q[0], _mm256_loadu_ps(xb));
        t = _mm256_fmadd_ps(q[1], _mm256_loadu_ps(xb + 8), t);
        t = _mm256_fmadd_ps(q[2], _mm256_loadu_ps(xb + 16), t);
        t = _mm256_fmadd_ps(q[3], _mm256_loadu_ps(xb + 24), t);
        acc[r] = _mm256_fmadd_ps(t, d, acc[r]);
      }
    }
    for (int r = 0; r < R; r++) {
      float offset = 0.0f;
      if (Q4_1) {  // sum_b m_b xsum_b, in 8 lanes
        __m256 o = _mm256_setzero_ps();
        for (int64_t b = 0; b < B8; b += 8)
          o = _mm256_fmadd_ps(_mm256_loadu_ps(mB + n * B8 + b), _mm256_loadu_ps(xsum + r * B8 + b), o);
        offset = lanes_sum(o);
      }
      y[r * ldy + n] = lanes_sum(acc[r]) + offset;
    }
  }
}

template <bool Q4_1>
void rows_times_blocks(int R, const float* x, const float* xsum, int64_t K, const uint8_t* qs, const float* scales,
                       const float* mB, float* y, int64_t ldy, int64_t n0, int64_t n1) {
  switch (R) {  // one instantiation per count, each row's instructions the same in all of them
    case 1: return rows_times_block_rows<1, Q4_1>(x, xsum, K, qs, scales, mB, y, ldy, n0, n1);
    case 2: return rows_times_block_rows<2, Q4_1>(x, xsum, K, qs, scales, mB, y, ldy, n0, n1);
    case 3: return rows_times_block_rows<3, Q4_1>(x, xsum, K, qs, scales, mB, y, ldy, n0, n1);
    case 4: return rows_times_block_rows<4, Q4_1>(x, xsum, K, qs, scales, mB, y, ldy, n0, n1);
    case 5: return rows_times_block_rows<5, Q4_1>(x, xsum, K, qs, scales, mB, y, ldy, n0, n1);
    case 6: return rows_times_block_rows<6, Q4_1>(x, xsum, K, qs, scales, mB, y, ldy, n0, n1);
    case 7: return rows_times_block_rows<7, Q4_1>(x, xsum, K, qs, scales, mB, y, ldy, n0, n1);
    case 8: return rows_times_block_rows<8, Q4_1>(x, xsum, K, qs, scales, mB, y, ldy, n0, n1);
    case 9: return rows_times_block_rows<9, Q4_1>(x, xsum, K, qs, scales, mB, y, ldy, n0, n1);
    case 10: return rows_times_block_rows<10, Q4_1>(x, xsum, K, qs, scales, mB, y, ldy, n0, n1);
    case 11: return rows_times_block_rows<11, Q4_1>(x, xsum, K, qs, scales, mB, y, ldy, n0, n1);
    case 12: return rows_times_block_rows<12, Q4_1>(x, xsum, K, qs, scales, mB, y, ldy, n0, n1);
    case 13: return rows_times_block_rows<13, Q4_1>(x, xsum, K, qs, scales, mB, y, ldy, n0, n1);
    case 14: return rows_times_block_rows<14, Q4_1>(x, xsum, K, qs, scales, mB, y, ldy, n0, n1);
    case 15: return rows_times_block_rows<15, Q4_1>(x, xsum, K, qs, scales, mB, y, ldy, n0, n1);
    default: return rows_times_block_rows<16, Q4_1>(x, xsum, K, qs, scales, mB, y, ldy, n0, n1);
  }
}

}  // namespace

torch::Tensor blocks_mm(torch::Tensor x, torch::Tensor qs, torch::Tensor d, torch::Tensor m) {
  const bool q4_1 = m.numel() > 0;  // Q4_1 has an m per block; Q8_0 passes an empty m
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == torch::kFloat32 && x.is_contiguous(),
              "blocks_mm: x must be (M, K) float32, contiguous");
  TORCH_CHECK(qs.dim() == 2 && qs.scalar_type() == torch::kUInt8 && qs.is_contiguous(), "blocks_mm: qs must be (N, .) uint8");
  const int64_t M = x.size(0), K = x.size(1), N = qs.size(0), B = K / BLOCK, B8 = (B + 7) / 8 * 8;
  TORCH_CHECK(K % BLOCK == 0 && qs.size(1) == (q4_1 ? K / 2 : K), "blocks_mm: x's K (", K,
              ") must be whole blocks of 32 matching qs (", N, ", ", qs.size(1), ")");
  TORCH_CHECK(d.scalar_type() == torch::kFloat32 && d.is_contiguous() && d.numel() == N * B, "blocks_mm: d must be (N, K/32) float32");
  TORCH_CHECK(!q4_1 || (m.scalar_type() == torch::kFloat32 && m.is_contiguous() && m.numel() == N * B8),
              "blocks_mm: m must be (N, K/32 rounded up to 8) float32, zero past K/32");
  auto y = torch::empty({M, N}, x.options());
  auto xsum = torch::zeros({M, B8}, x.options());  // each row's sum over each block, for Q4_1's m; zero past B
  const float* xp = x.data_ptr<float>();
  float* sp = xsum.data_ptr<float>();
  if (q4_1)
    for (int64_t r = 0; r < M; r++)
      for (int64_t b = 0; b < B; b++) {
        const float* xb = xp + r * K + b * BLOCK;
        const __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_loadu_ps(xb), _mm256_loadu_ps(xb + 8)),
                                       _mm256_add_ps(_mm256_loadu_ps(xb + 16), _mm256_loadu_ps(xb + 24)));
        sp[r * B8 + b] = lanes_sum(s);
      }
  const uint8_t* qp = qs.data_ptr<uint8_t>();
  const float* dp = d.data_ptr<float>();
  const float* mp = q4_1 ? m.data_ptr<float>() : nullptr;
  float* yp = y.data_ptr<float>();
  // output rows split among torch's threads; every output is computed whole by one thread, so threads change nothing
  at::parallel_for(0, N, 16, [&](int64_t n0, int64_t n1) {
    for (int64_t r0 = 0; r0 < M; r0 += ROWS) {
      const int R = static_cast<int>(std::min<int64_t>(ROWS, M - r0));
      if (q4_1) rows_times_blocks<true>(R, xp + r0 * K, sp + r0 * B8, K, qp, dp, mp, yp + r0 * N, N, n0, n1);
      else rows_times_blocks<false>(R, xp + r0 * K, sp + r0 * B8, K, qp, dp, mp, yp + r0 * N, N, n0, n1);
    }
  });
  return y;
}


// ---- attention of new tokens at the cache's end, each row alone --------------------------------------------------
// attend_rows(q (T, nh, hs), k, v (nkv, S, hs), scale) -> (T, nh, hs): token t of the T newest (the cache's last T
// of S) attends keys 0 .. S - T + t, as its one-token step did; query head h reads key/value head h / (nh / nkv).
// Each (token, head) is computed alone, its sums in a fixed order over its own keys only: bit for bit the one-token
// step's, whatever T is (torch's attention kernel rounds a row differently beside others).

inline float dot(const float* a, const float* b, int64_t n) {  // 8 lanes, then the rest in order
  __m256 acc = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc);
  float s = lanes_sum(acc);
  for (; i < n; i++) s = std::fma(a[i], b[i], s);
  return s;
}

inline void add_scaled(float* out, float w, const float* x, int64_t n) {  // out += w x
  const __m256 wv = _mm256_set1_ps(w);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, _mm256_fmadd_ps(wv, _mm256_loadu_ps(x + i), _mm256_loadu_ps(out + i)));
  for (; i < n; i++) out[i] = std::fma(w, x[i], out[i]);
}

torch::Tensor attend_rows(torch::Tensor q, torch::Tensor k, torch::Tensor v, double scale) {
  TORCH_CHECK(q.dim() == 3 && q.scalar_type() == torch::kFloat32 && q.is_contiguous(), "attend_rows: q (T, nh, hs) float32");
  TORCH_CHECK(k.dim() == 3 && v.sizes() == k.sizes() && k.scalar_type() == torch::kFloat32 &&
              v.scalar_type() == torch::kFloat32 && k.stride(2) == 1 && v.stride(2) == 1,
              "attend_rows: k and v (nkv, S, hs) float32, each row contiguous");
  const int64_t T = q.size(0), nh = q.size(1), hs = q.size(2), nkv = k.size(0), S = k.size(1);
  TORCH_CHECK(k.size(2) == hs && nh % nkv == 0 && S >= T, "attend_rows: shapes do not match");
  auto out = torch::zeros({T, nh, hs}, q.options());
  const float* qp = q.data_ptr<float>();
  const float* kp = k.data_ptr<float>();
  const float* vp = v.data_ptr<float>();
  float* op = out.data_ptr<float>();
  const int64_t group = nh / nkv, ks0 = k.stride(0), ks1 = k.stride(1), vs0 = v.stride(0), vs1 = v.stride(1);
  const float sc = static_cast<float>(scale);
  at::parallel_for(0, T * nh, 1, [&](int64_t a, int64_t b) {
    std::vector<float> p(S);
    for (int64_t row = a; row < b; row++) {
      const int64_t t = row / nh, h = row % nh, L = S - T + 1 + t, g = h / group;
      const float* qr = qp + row * hs;
      float top = -INFINITY;
      for (int64_t j = 0; j < L; j++) {
        p[j] = dot(qr, kp + g * ks0 + j * ks1, hs) * sc;
        top = std::max(top, p[j]);
      }
      float sum = 0.0f;
      for (int64_t j = 0; j < L; j++) {
        p[j] = std::exp(p[j] - top);  // softmax, the largest score subtracted first
        sum += p[j];
      }
      float* o = op + row * hs;
      for (int64_t j = 0; j < L; j++) add_scaled(o, p[j], vp + g * vs0 + j * vs1, hs);
      for (int64_t i = 0; i < hs; i++) o[i] /= sum;
    }
  });
  return out;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("blocks_mm", &blocks_mm, "x (M, K) float32 times a GGUF file's Q4_1 blocks (d, m) or Q8_0 blocks (d, empty m) -> (M, N)");
  m.def("attend_rows", &attend_rows, "q (T, nh, hs), k, v (nkv, S, hs), scale -> (T, nh, hs): each new token alone");
}
