"""PyTorch's causal F.scaled_dot_product_attention on the CPU, forward + backward, the shape and
threads of bench/attention_cpu.c: `python3 bench/attention_torch.py [B H T D [reps]]`."""
import statistics
import sys
import time

import torch
import torch.nn.functional as F

shape = [int(a) for a in sys.argv[1:5]] or [8, 8, 1024, 64]
reps = int(sys.argv[5]) if len(sys.argv) > 5 else 5
b, h, t, d = shape
x = [(torch.rand(b, h, t, d) - 0.5).requires_grad_() for _ in range(3)]
times = []
for r in range(reps + 1):  # the first is a warm-up
    t0 = time.perf_counter()
    y = F.scaled_dot_product_attention(x[0], x[1], x[2], is_causal=True)
    y.mean().backward()
    times.append(time.perf_counter() - t0)
    for a in x:
        a.grad = None
med = statistics.median(times[1:])
flops = 3.5 * 2.0 * b * h * t * t * d
print(f"torch {torch.__version__} SDPA f32 causal {shape}, {torch.get_num_threads()} threads: "
      f"forward+backward {1e3 * med:.1f} ms (median of {reps}), {flops / med / 1e9:.1f} GFLOP/s")
