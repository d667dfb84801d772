/* Shows that cudacpu's shuffled schedule exposes a race in a block reduction. Two kernels sum
 * 256 integers per block (exact in float in any order): one as block_reduce.cuh does, one with
 * the __syncthreads between the warps' stores to shared memory and warp 0's reads removed. Under
 * CUDACPU_SCHEDULE=random:7 (how ctest runs this) warp 0 runs on from its shuffles and reads
 * slots before their warps wrote them (cudacpu's default order does too: nothing but the barrier
 * holds warp 0 back), so the racy sums are wrong; the test passes only when the correct kernel is
 * exact every time AND the racy one was wrong at least once. Launched with cudacpu::launch_n, which is what
 * the rewriter makes of <<<...>>>: this kernel exists only here. */
#include <cstdio>
#include <vector>

#include "amp/tensor.h"
#include "dev_buffer.h"

/* amp_cudacpu_test links core/error.c and core/backend_check.c into every test: they name
 * dtypes. */
extern "C" size_t amp_dtype_size(amp_dtype dt) { return dt == AMP_F16 || dt == AMP_BF16 ? 2 : 4; }
extern "C" const char *amp_dtype_name(amp_dtype dt) { return dt == AMP_F32 ? "f32" : "other"; }

static const int BLOCK = 256, WARPS = BLOCK / 32, BLOCKS = 64;

template <bool RACY>
static __global__ void block_sum_kernel(const float *x, float *out) {
    __shared__ float warp_sums[WARPS];
    float v = x[blockIdx.x * BLOCK + threadIdx.x];
    for (int k = 16; k >= 1; k >>= 1) v += __shfl_xor_sync(0xffffffffu, v, k);
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) warp_sums[warp] = v;
    if (!RACY) __syncthreads(); /* the barrier the racy variant lacks */
    if (warp == 0) {
        v = lane < WARPS ? warp_sums[lane] : 0.0f;
        for (int k = 16; k >= 1; k >>= 1) v += __shfl_xor_sync(0xffffffffu, v, k);
        if (lane == 0) out[blockIdx.x] = v;
    }
}

/* Blocks whose sum differs from the exact one, over `runs` launches (-1: a launch failed). */
template <bool RACY>
static int wrong_blocks(dev_buf &x, dev_buf &out, const std::vector<float> &want, int runs) {
    int wrong = 0;
    for (int r = 0; r < runs; r++) {
        cudacpu::launch_n("block_sum_kernel", block_sum_kernel<RACY>, dim3(BLOCKS), dim3(BLOCK),
                          0, (cudaStream_t)0, x.dev<float>(), out.dev<float>());
        if (!dev_sync()) return -1;
        out.download();
        for (int b = 0; b < BLOCKS; b++) wrong += out.h<float>()[b] != want[b];
    }
    return wrong;
}

int main(void) {
    dev_buf x((size_t)BLOCKS * BLOCK * 4), out((size_t)BLOCKS * 4);
    std::vector<float> want(BLOCKS, 0.0f);
    for (int i = 0; i < BLOCKS * BLOCK; i++) {
        float v = (float)(1 + (i * 7919) % 1000);
        x.h<float>()[i] = v;
        want[i / BLOCK] += v; /* integers below 2^24: exact in any order */
    }
    x.upload();
    int good = wrong_blocks<false>(x, out, want, 10);
    int racy = wrong_blocks<true>(x, out, want, 10);
    printf("test_race_cudacpu: correct kernel %d wrong block sums, racy kernel %d of %d\n", good,
           racy, 10 * BLOCKS);
    bool ok = good == 0 && racy > 0 && out.guard_intact();
    printf("test_race_cudacpu: %s\n", ok ? "race detected, correct kernel exact"
                                         : "FAILED: the schedule did not expose the race");
    return ok ? 0 : 1;
}
