"""Time the rank analysis at the size of a PTB evaluation (82k tokens x 10k words).

    python tools/bench_rank.py [--rows 80000] [--vocab 10000] [--d 400] [--device cpu]

Streams the log-probabilities of a random softmax head of dimension d (with bias) in
row chunks through the Gram route, prints wall time and the rank with DRILL's tol = 1.0
(which must come out as d + 2). Nothing is timed inside the test suite.
"""

from __future__ import annotations

import argparse
import time

import torch

from drillbook.analysis import DRILL_TOL, singular_values
from drillbook.heads import build_head


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=80_000)
    parser.add_argument("--vocab", type=int, default=10_000)
    parser.add_argument("--d", type=int, default=400)
    parser.add_argument("--chunk", type=int, default=4096)
    parser.add_argument("--device", default=None)
    args = parser.parse_args()
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    gen = torch.Generator(device="cpu").manual_seed(0)
    head = build_head("softmax", vocab_size=args.vocab, d_hidden=args.d).to(device)
    with torch.no_grad():
        head.bias.normal_(generator=gen)

    def chunks():
        with torch.no_grad():
            for start in range(0, args.rows, args.chunk):
                n = min(args.chunk, args.rows - start)
                h = torch.randn(n, args.d, generator=gen).to(device)
                yield head.log_prob(h)

    t0 = time.perf_counter()
    spec = singular_values(chunks(), method="gram", device=device)
    seconds = time.perf_counter() - t0
    print(f"{args.rows} x {args.vocab} on {device} ({torch.get_num_threads()} threads): "
          f"{seconds:.1f} s; rank(tol=1) = {spec.rank(DRILL_TOL)} (d + 2 = {args.d + 2}); "
          f"resolution {spec.resolution:.3g}")


if __name__ == "__main__":
    main()
