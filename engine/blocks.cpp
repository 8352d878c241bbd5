// The GGUF file's own blocks times float32 activations, on a CPU with AVX2 and FMA: engine/blocks.py builds and
// loads this file (torch.utils.cpp_extension), engine/llama.py's "q4_1" format calls it.
//
//   blocks_mm(x (M, K) float32, qs, d, m) -> y (M, N) float32, y = x @ W.T with W as the file stores it:
//     Q4_1: qs (N, K/2) uint8, a block's 16 bytes as in the file (weight j of a block of 32 is the low nibble of
//           byte j for j < 16, the high nibble of byte j - 16 after); d (N, K/32) float32; m (N, B8) float32, its
//           K/32 blocks then zeros up to a multiple of 8 (B8): w = d q + m (ggml's dequantize_row_q4_1)
//     Q8_0: qs (N, K) int8 as uint8; d (N, K/32) float32; m empty: w = d q
//   attend_rows(q, k, v, scale): attention of the newest tokens, each alone (below)
//   layer_rows(x, ln1, qkv, proj, ln2, fc, down, k, v, start, cos, sin, nh, eps): a whole Llama block of the newest
//     tokens in one call, its products and attention the two above (below): a step's thirty torch operations a
//     layer cost more than its products did (BENCHMARKS.md, "a Llama block in one call")
//
// Why a kernel of our own: torch's weight-only kernels dequantize a tile of weights for every 4 rows of
// activations, so a (K+1)-token verification costs about (K+1)/4 one-token steps, and they round the scales and the
// activations to bfloat16. Here a block of weights is unpacked once per call and multiplied by every row:
// a wider forward adds only each row's own multiply-adds, and the weights are the file's, exactly.
//
// Rows equal by construction: every row of x goes through the same instructions in the same order, whatever M is
// and wherever the row sits (rows are taken up to 10 at a time, each with accumulators of its own; no arithmetic
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
constexpr int ROWS = 10;       // rows of x per unpacked block at most: past 10 the accumulators spill from AVX2's 16
                               // registers to the stack, and a row costs more than a block's unpacking saves; M rows
                               // go in groups of equal size (17: 9 and 8, not 16 and 1)

inline float lanes_sum(__m256 v) {  // the 8 lanes' sum, always in the same order: (0+4, 1+5, 2+6, 3+7), then pairs
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

inline void q4_1_block(const uint8_t* qs, __m256 q[4]) {  // 16 bytes -> the block's 32 q (0..15) as floats, in order
  const __m256i raw = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qs)));
  const __m256i sel0 = _mm256_setr_epi8(0, -1, -1, -1, 1, -1, -1, -1, 2, -1, -1, -1, 3, -1, -1, -1,
                                        4, -1, -1, -1, 5, -1, -1, -1, 6, -1, -1, -1, 7, -1, -1, -1);
  const __m256i sel1 = _mm256_add_epi8(sel0, _mm256_set1_epi32(8));  // bytes 8..15 (the -1s stay negative: zeros)
  const __m256i b0 = _mm256_shuffle_epi8(raw, sel0), b1 = _mm256_shuffle_epi8(raw, sel1);
  const __m256i low = _mm256_set1_epi32(0x0F);
  q[0] = _mm256_cvtepi32_ps(_mm256_and_si256(b0, low));
  q[1] = _mm256_cvtepi32_ps(_mm256_and_si256(b1, low));
  q[2] = _mm256_cvtepi32_ps(_mm256_srli_epi32(b0, 4));
  q[3] = _mm256_cvtepi32_ps(_mm256_srli_epi32(b1, 4));
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

// One matrix as the kernel reads it: blocks_mm's (qs, d, m), checked once.
struct Blocks {
  const uint8_t* qs;
  const float* d;
  const float* m;  // Q4_1's (N, B8); nullptr for Q8_0
  int64_t N, K;    // outputs, stored (padded) inputs
};

Blocks blocks_of(const torch::Tensor& qs, const torch::Tensor& d, const torch::Tensor& m) {
  const bool q4_1 = m.numel() > 0;  // Q4_1 has an m per block; Q8_0 passes an empty m
  TORCH_CHECK(qs.dim() == 2 && qs.scalar_type() == torch::kUInt8 && qs.is_contiguous(), "blocks_mm: qs must be (N, .) uint8");
  const int64_t N = qs.size(0), K = qs.size(1) * (q4_1 ? 2 : 1), B = K / BLOCK, B8 = (B + 7) / 8 * 8;
  TORCH_CHECK(K % BLOCK == 0, "blocks_mm: qs (", N, ", ", qs.size(1), ") is not whole blocks of 32");
  TORCH_CHECK(d.scalar_type() == torch::kFloat32 && d.is_contiguous() && d.numel() == N * B, "blocks_mm: d must be (N, K/32) float32");
  TORCH_CHECK(!q4_1 || (m.scalar_type() == torch::kFloat32 && m.is_contiguous() && m.numel() == N * B8),
              "blocks_mm: m must be (N, K/32 rounded up to 8) float32, zero past K/32");
  return {qs.data_ptr<uint8_t>(), d.data_ptr<float>(), q4_1 ? m.data_ptr<float>() : nullptr, N, K};
}

Blocks blocks_of(const std::vector<torch::Tensor>& parts) {
  TORCH_CHECK(parts.size() == 3, "a matrix is its (qs, d, m): engine/blocks.py q4_1_parts or q8_0_parts");
  return blocks_of(parts[0], parts[1], parts[2]);
}

void mm(const float* x, int64_t M, const Blocks& w, float* y) {  // x (M, w.K) -> y (M, w.N) = x @ W.T
  const int64_t K = w.K, N = w.N, B = K / BLOCK, B8 = (B + 7) / 8 * 8;
  std::vector<float> xsum(w.m ? M * B8 : 0, 0.0f);  // each row's sum over each block, for Q4_1's m; zero past B
  float* sp = xsum.data();
  if (w.m)
    for (int64_t r = 0; r < M; r++)
      for (int64_t b = 0; b < B; b++) {
        const float* xb = x + r * K + b * BLOCK;
        const __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_loadu_ps(xb), _mm256_loadu_ps(xb + 8)),
                                       _mm256_add_ps(_mm256_loadu_ps(xb + 16), _mm256_loadu_ps(xb + 24)));
        sp[r * B8 + b] = lanes_sum(s);
      }
  // output rows split among torch's threads; every output is computed whole by one thread, so threads change nothing
  at::parallel_for(0, N, 16, [&](int64_t n0, int64_t n1) {
    const int64_t groups = (M + ROWS - 1) / ROWS;  // as few groups as fit, of sizes within one of each other
    for (int64_t g = 0, r0 = 0; g < groups; g++) {
      const int R = static_cast<int>(M / groups + (g < M % groups ? 1 : 0));
      if (w.m) rows_times_blocks<true>(R, x + r0 * K, sp + r0 * B8, K, w.qs, w.d, w.m, y + r0 * N, N, n0, n1);
      else rows_times_blocks<false>(R, x + r0 * K, sp + r0 * B8, K, w.qs, w.d, w.m, y + r0 * N, N, n0, n1);
      r0 += R;
    }
  });
}

}  // namespace

torch::Tensor blocks_mm(torch::Tensor x, torch::Tensor qs, torch::Tensor d, torch::Tensor m) {
  const Blocks w = blocks_of(qs, d, m);
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == torch::kFloat32 && x.is_contiguous(),
              "blocks_mm: x must be (M, K) float32, contiguous");
  TORCH_CHECK(x.size(1) == w.K, "blocks_mm: x's K (", x.size(1), ") must be whole blocks of 32 matching qs (", qs.size(0),
              ", ", qs.size(1), ")");
  auto y = torch::empty({x.size(0), w.N}, x.options());
  mm(x.data_ptr<float>(), x.size(0), w, y.data_ptr<float>());
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

namespace {

// out (T, nh, hs), zeroed: the T newest of S tokens in k and v (row j of head g at k + g ks0 + j ks1), each alone
void attend(const float* q, int64_t T, int64_t nh, int64_t hs, const float* k, int64_t ks0, int64_t ks1,
            const float* v, int64_t vs0, int64_t vs1, int64_t nkv, int64_t S, float scale, float* out) {
  const int64_t group = nh / nkv;
  at::parallel_for(0, T * nh, 1, [&](int64_t a, int64_t b) {
    std::vector<float> p(S);
    for (int64_t row = a; row < b; row++) {
      const int64_t t = row / nh, h = row % nh, L = S - T + 1 + t, g = h / group;
      const float* qr = q + row * hs;
      float top = -INFINITY;
      for (int64_t j = 0; j < L; j++) {
        p[j] = dot(qr, k + g * ks0 + j * ks1, hs) * scale;
        top = std::max(top, p[j]);
      }
      float sum = 0.0f;
      for (int64_t j = 0; j < L; j++) {
        p[j] = std::exp(p[j] - top);  // softmax, the largest score subtracted first
        sum += p[j];
      }
      float* o = out + row * hs;
      for (int64_t j = 0; j < L; j++) add_scaled(o, p[j], v + g * vs0 + j * vs1, hs);
      for (int64_t i = 0; i < hs; i++) o[i] /= sum;
    }
  });
}

}  // namespace

torch::Tensor attend_rows(torch::Tensor q, torch::Tensor k, torch::Tensor v, double scale) {
  TORCH_CHECK(q.dim() == 3 && q.scalar_type() == torch::kFloat32 && q.is_contiguous(), "attend_rows: q (T, nh, hs) float32");
  TORCH_CHECK(k.dim() == 3 && v.sizes() == k.sizes() && k.scalar_type() == torch::kFloat32 &&
              v.scalar_type() == torch::kFloat32 && k.stride(2) == 1 && v.stride(2) == 1,
              "attend_rows: k and v (nkv, S, hs) float32, each row contiguous");
  const int64_t T = q.size(0), nh = q.size(1), hs = q.size(2), nkv = k.size(0), S = k.size(1);
  TORCH_CHECK(k.size(2) == hs && nh % nkv == 0 && S >= T, "attend_rows: shapes do not match");
  auto out = torch::zeros({T, nh, hs}, q.options());
  attend(q.data_ptr<float>(), T, nh, hs, k.data_ptr<float>(), k.stride(0), k.stride(1), v.data_ptr<float>(),
         v.stride(0), v.stride(1), nkv, S, static_cast<float>(scale), out.data_ptr<float>());
  return out;
}


// ---- a whole decoder layer of the newest tokens, each row alone ----------------------------------------------------
// layer_rows(x (T, C), ln1, qkv, proj, ln2, fc, down, k, v (nkv, W, hs), start, cos, sin (W', hs), nh, eps) -> x'
// engine/llama.py run_layers' Llama block for T tokens at positions start .. start + T - 1 of a one-sequence cache,
// in one call instead of some thirty torch operations (each a few microseconds of dispatch, the step's larger part):
//   h = rmsnorm(x) ln1; q, k, v = h @ qkv.T; q, k turned by RoPE (cos, sin: rope_tables'); k, v written to the cache
//   at slots start..; each query attends alone (attend); x += y @ proj.T; h = rmsnorm(x) ln2;
//   gate, up = h @ fc.T; x += (silu(gate) up) @ down.T
// The matrices are blocks_mm's (qs, d, m), their inputs padded with zeros to the blocks' K. Every operation is a loop
// over rows with a body of its own per row (norms summed in a fixed order, products by mm, attention by attend),
// compiled with -ffp-contract=off: a row's numbers do not depend on T or on its place, as in blocks_mm.

namespace {

// out (T, K) = rmsnorm(x (T, C)) w, zeros in columns C..K-1 (the next product's padding)
void rms_rows(const float* x, int64_t T, int64_t C, const float* w, float eps, float* out, int64_t K) {
  for (int64_t t = 0; t < T; t++) {
    const float* xr = x + t * C;
    __m256 acc = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= C; i += 8) {
      const __m256 a = _mm256_loadu_ps(xr + i);
      acc = _mm256_fmadd_ps(a, a, acc);
    }
    float ss = lanes_sum(acc);
    for (; i < C; i++) ss = std::fma(xr[i], xr[i], ss);
    const float r = 1.0f / std::sqrt(ss / static_cast<float>(C) + eps);
    float* o = out + t * K;
    for (i = 0; i < C; i++) o[i] = xr[i] * r * w[i];
    for (; i < K; i++) o[i] = 0.0f;
  }
}

// a (T, hs) head's rows at positions p0.. turned by RoPE into out (row t at out + t ostride): model.rotate's pairs,
// a_j cos_j + a_(j^1) sin_j with rope_tables' full-width (cos, sin)
void rope_rows(const float* a, int64_t T, int64_t astride, int64_t hs, const float* cos, const float* sin, int64_t p0,
               float* out, int64_t ostride) {
  for (int64_t t = 0; t < T; t++) {
    const float* ar = a + t * astride;
    const float* c = cos + (p0 + t) * hs;
    const float* s = sin + (p0 + t) * hs;
    float* o = out + t * ostride;
    for (int64_t j = 0; j < hs; j++) o[j] = ar[j] * c[j] + ar[j ^ 1] * s[j];
  }
}

}  // namespace

torch::Tensor layer_rows(torch::Tensor x, torch::Tensor ln1, std::vector<torch::Tensor> qkv,
                         std::vector<torch::Tensor> proj, torch::Tensor ln2, std::vector<torch::Tensor> fc,
                         std::vector<torch::Tensor> down, torch::Tensor k, torch::Tensor v, int64_t start,
                         torch::Tensor cos, torch::Tensor sin, int64_t nh, double eps) {
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == torch::kFloat32 && x.is_contiguous(), "layer_rows: x (T, C) float32");
  const int64_t T = x.size(0), C = x.size(1);
  TORCH_CHECK(k.dim() == 3 && v.sizes() == k.sizes() && k.scalar_type() == torch::kFloat32 &&
              v.scalar_type() == torch::kFloat32 && k.stride(2) == 1 && v.stride(2) == 1,
              "layer_rows: the cache's k and v (nkv, W, hs) float32, each row contiguous");
  const int64_t nkv = k.size(0), hs = k.size(2), S = start + T;
  TORCH_CHECK(start >= 0 && S <= k.size(1) && nh % nkv == 0 && hs % 2 == 0, "layer_rows: slots ", start, "..", S,
              " do not fit the cache (", k.size(1), ") or the heads do not match");
  TORCH_CHECK(cos.scalar_type() == torch::kFloat32 && sin.scalar_type() == torch::kFloat32 && cos.is_contiguous() &&
              sin.is_contiguous() && cos.dim() == 2 && cos.sizes() == sin.sizes() && cos.size(1) == hs &&
              cos.size(0) >= S, "layer_rows: cos and sin (W, hs) float32, a row per position");
  for (const auto& w : {ln1, ln2})
    TORCH_CHECK(w.scalar_type() == torch::kFloat32 && w.is_contiguous() && w.numel() == C, "layer_rows: norms (C,) float32");
  const Blocks wqkv = blocks_of(qkv), wproj = blocks_of(proj), wfc = blocks_of(fc), wdown = blocks_of(down);
  const int64_t Nq = (nh + 2 * nkv) * hs, I = wfc.N / 2;
  TORCH_CHECK(wqkv.N == Nq && wqkv.K >= C && wproj.N == C && wproj.K >= nh * hs && wfc.K >= C && wfc.N % 2 == 0 &&
              wdown.N == C && wdown.K >= I, "layer_rows: the matrices' shapes do not make a Llama block of width ", C);
  const float e = static_cast<float>(eps);
  auto out = x.clone();  // the residual stream, a new tensor (a kept layer's output stays as it was)
  float* xr = out.data_ptr<float>();
  std::vector<float> h(T * std::max(wqkv.K, wfc.K)), a(T * std::max(Nq, wfc.N));
  std::vector<float> y(T * std::max(wproj.K, wdown.K), 0.0f);  // a product's input, zero in its padding columns
  std::vector<float> q(T * nh * hs), o(T * C);
  // attention: norm, q k v, RoPE, the cache, each query alone
  rms_rows(xr, T, C, ln1.data_ptr<float>(), e, h.data(), wqkv.K);
  mm(h.data(), T, wqkv, a.data());  // (T, Nq)
  float* kp = k.data_ptr<float>();
  float* vp = v.data_ptr<float>();
  const float* cp = cos.data_ptr<float>();
  const float* sp = sin.data_ptr<float>();
  for (int64_t g = 0; g < nh; g++)
    rope_rows(a.data() + g * hs, T, Nq, hs, cp, sp, start, q.data() + g * hs, nh * hs);
  for (int64_t g = 0; g < nkv; g++) {
    rope_rows(a.data() + (nh + g) * hs, T, Nq, hs, cp, sp, start, kp + g * k.stride(0) + start * k.stride(1), k.stride(1));
    for (int64_t t = 0; t < T; t++)
      std::copy_n(a.data() + t * Nq + (nh + nkv + g) * hs, hs, vp + g * v.stride(0) + (start + t) * v.stride(1));
  }
  std::vector<float> att(T * nh * hs, 0.0f);
  attend(q.data(), T, nh, hs, kp, k.stride(0), k.stride(1), vp, v.stride(0), v.stride(1), nkv, S,
         static_cast<float>(std::pow(static_cast<double>(hs), -0.5)), att.data());
  for (int64_t t = 0; t < T; t++) std::copy_n(att.data() + t * nh * hs, nh * hs, y.data() + t * wproj.K);
  mm(y.data(), T, wproj, o.data());
  for (int64_t i = 0; i < T * C; i++) xr[i] += o[i];
  // the MLP: norm, gate and up, SwiGLU, down
  rms_rows(xr, T, C, ln2.data_ptr<float>(), e, h.data(), wfc.K);
  mm(h.data(), T, wfc, a.data());  // (T, 2 I)
  std::fill(y.begin(), y.end(), 0.0f);
  for (int64_t t = 0; t < T; t++)
    for (int64_t i = 0; i < I; i++) {
      const float gate = a[t * wfc.N + i], up = a[t * wfc.N + I + i];
      y[t * wdown.K + i] = gate / (1.0f + std::exp(-gate)) * up;
    }
  mm(y.data(), T, wdown, o.data());
  for (int64_t i = 0; i < T * C; i++) xr[i] += o[i];
  return out;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("blocks_mm", &blocks_mm, "x (M, K) float32 times a GGUF file's Q4_1 blocks (d, m) or Q8_0 blocks (d, empty m) -> (M, N)");
  m.def("layer_rows", &layer_rows, "a Llama block of the T newest tokens at slots start.. of a one-sequence cache, each row alone");
  m.def("attend_rows", &attend_rows, "q (T, nh, hs), k, v (nkv, S, hs), scale -> (T, nh, hs): each new token alone");
}
