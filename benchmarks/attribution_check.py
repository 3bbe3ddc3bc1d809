"""Whether the measured attribution's shares match the parts of a step timed alone.

    .venv/bin/python benchmarks/attribution_check.py [--threads 2] [--rounds 3]

The attribution (``crossover_study.measure.attribution``) splits a profiled block's
time into categories and takes the profiler's own cost out by an estimate. This checks
the estimate where a category is a separable part of the step: the DataLoader plug-in
(``tests/plugins/torch_dataloader.py``), whose ``data`` share is the loader's
``next()``, and the NumPy plug-in (``tests/plugins/torch_numpy_augment.py``), whose
per-sample loop is part of its ``python`` share. Each round measures the point as a job
does (timed blocks, then the profiled block) and times the separable part alone, without
the profiler, in the same process.

Prints per round the timed step, the attributed share's seconds per step, the part alone
and their ratio; a last line ``attributed/alone: <case> median=<r> (min=<r> max=<r>)``
per case. For the loader, 1 is exact agreement; for the NumPy loop the attributed
``python`` also holds the module calls' and optimizer's Python, so it is at least 1.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

import numpy as np  # noqa: E402

from crossover_study.measure import frameworks  # noqa: E402
from crossover_study.measure.point import measure_point  # noqa: E402
from crossover_study.study.config import load_config  # noqa: E402
from crossover_study.study.points import TimingPolicy  # noqa: E402
from crossover_study.study.spec import PointSpec  # noqa: E402

#: As the unseen study times a point (config/studies/unseen.yaml).
POLICY = TimingPolicy(
    min_block_s=0.05, n_blocks=5, max_warmup_s=1.0, max_point_s=6.0, sync_check_s=0
)


def loader_alone(batch: int, repeats: int = 200) -> float:
    """Seconds per batch of the DataLoader plug-in's loader alone (same dataset, batch,
    shuffling), new epochs included, no profiler."""
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    sys.path.insert(0, str(ROOT / "tests" / "plugins"))
    from torch_dataloader import BATCHES

    generator = torch.Generator().manual_seed(0)
    x = torch.randn(batch * BATCHES, 32, generator=generator)
    y = torch.randn(batch * BATCHES, 1, generator=generator)
    loader = DataLoader(TensorDataset(x, y), batch_size=batch, shuffle=True, generator=generator)
    batches, n = iter(loader), 0
    started = time.perf_counter()
    while n < repeats:
        try:
            next(batches)
        except StopIteration:
            batches = iter(loader)
            continue
        n += 1
    return (time.perf_counter() - started) / repeats


def augment_alone(batch: int, repeats: int = 200) -> float:
    """Seconds per step of the NumPy plug-in's per-sample loop alone (its code as in
    ``tests/plugins/torch_numpy_augment.py``), no profiler."""
    rng = np.random.default_rng(0)
    images = rng.standard_normal((batch, 16, 16)).astype(np.float32)
    crops = np.empty((batch, 1, 12, 12), dtype=np.float32)
    started = time.perf_counter()
    for _ in range(repeats):
        for i in range(batch):
            r, c = rng.integers(0, 5, 2)
            crop = images[i, r : r + 12, c : c + 12]
            crop = crop[:, ::-1] if rng.random() < 0.5 else crop
            crops[i, 0] = (crop - crop.mean()) / (crop.std() + 1e-6)
    return (time.perf_counter() - started) / repeats


#: (case, sizes, the category, the part alone).
CHECKS = (
    ("dataloader", {"batch": 512, "hidden": 128}, "data", lambda: loader_alone(512)),
    ("numpy-augment", {"batch": 64, "channels": 16}, "python", lambda: augment_alone(64)),
)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    load_config(ROOT / "config" / "studies" / "unseen.yaml")
    frameworks.import_framework("torch", "cpu", args.threads)
    ratios: dict[str, list[float]] = {}
    for round_ in range(args.rounds):
        for case, sizes, category, alone in CHECKS:
            point = PointSpec(case, "torch", "cpu", "eager", dict(sizes))
            row = measure_point(point, POLICY, 0.0, 0.0, args.threads)
            part = alone()
            attributed = row[f"attr_{category}_s"]
            ratios.setdefault(case, []).append(attributed / part)
            print(
                f"round {round_} {case}: step {row['step_time_s'] * 1e3:.3f} ms, "
                f"attributed {category} {attributed * 1e3:.3f} ms, alone {part * 1e3:.3f} ms, "
                f"ratio {attributed / part:.2f}, coverage {row['attr_coverage']:.2f}, "
                f"overhead {row['attr_overhead']:.2f}"
            )
    for case, values in ratios.items():
        print(
            f"attributed/alone: {case} median={statistics.median(values):.2f} "
            f"(min={min(values):.2f} max={max(values):.2f})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
