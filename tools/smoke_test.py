"""What a new user's first minute checks, run against an installed wheel (not the checkout).

    python tools/smoke_test.py        (from a directory where ./drillbook is NOT importable)

It imports the installed package, runs the console script, and puts every registered output
head through one forward and backward pass; then it checks the files a wheel must carry
(py.typed, the book's result files) and that the version has one value everywhere.
"""

from __future__ import annotations

import importlib.metadata
import shutil
import subprocess
import sys
from pathlib import Path


def main() -> int:
    import torch

    import drillbook
    from drillbook.experiments import book_results, load_results
    from drillbook.heads import HEADS, Features, build_head

    package = Path(drillbook.__file__).parent
    if "site-packages" not in package.parts:
        raise SystemExit(f"drillbook was imported from {package}, not from an installed wheel")
    assert importlib.metadata.version("drillbook") == drillbook.__version__
    assert (package / "py.typed").exists(), "py.typed is missing from the wheel"
    assert load_results(book_results()), "the wheel carries no result files"

    script = shutil.which("drillbook", path=str(Path(sys.executable).parent))
    out = subprocess.run([script, "--help"], capture_output=True, text=True, check=True).stdout
    assert "reproduce" in out, out

    torch.manual_seed(0)
    vocab, d = 50, 8
    for name, cls in HEADS.items():
        n_layers = 4  # DOC's default reads four layer outputs (embedding included)
        options = {"layer_sizes": [d] * n_layers} if cls.reads_layers else {}
        head = build_head(name, vocab_size=vocab, d_hidden=d,
                          embedding=torch.nn.Embedding(vocab, d), **options)
        last = torch.randn(3, 4, d, requires_grad=True)
        layers = (*[torch.randn(3, 4, d) for _ in range(n_layers - 1)], last)
        features = Features(last, layers) if cls.reads_layers else last
        loss = head.loss(features, torch.randint(vocab, (3, 4)))
        loss.backward()
        assert torch.isfinite(loss) and last.grad is not None, name
    print(f"drillbook {drillbook.__version__} (wheel) OK: console script, "
          f"{len(HEADS)} heads forward and backward, py.typed, result files")
    return 0


if __name__ == "__main__":
    sys.exit(main())
