"""The seeds' programs written again by hand for ``benchmarks/fidelity.py``
(``benchmarks/seed_loops/``): each is listed, imports nothing of the study it checks but
the plug-in return types, takes the seed's axes, and runs in ``benchmarks/plain_loop.py``
at a tiny size (the Keras ``fit`` ones in their seed's call shape)."""

import ast
import importlib.util
import inspect
from pathlib import Path

import pytest

from crossover_study.core.paths import REPO_ROOT
from crossover_study.study.cases import SEEDS

LOOPS = REPO_ROOT / "benchmarks" / "seed_loops"
#: Sizes small enough for a test; s004's batch 600 makes an epoch of its 1 198 windows 2 steps.
TINY = {
    "s000-hjb": {"batch": 4, "width": 4},
    "s001-mlp": {"batch": 4, "d_in": 8, "hidden": 4},
    "s002-iris": {"batch": 20, "hidden": 4},
    "s004-lstm": {"batch": 600, "units": 4, "seq_len": 3},
}


def _module(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def benchmarks():
    """``benchmarks/fidelity.py`` and ``benchmarks/plain_loop.py`` as modules."""
    folder = REPO_ROOT / "benchmarks"
    return (
        _module(folder / "fidelity.py", "fidelity_under_test"),
        _module(folder / "plain_loop.py", "plain_loop_under_test"),
    )


def test_every_seed_loop_is_listed_with_the_seeds_axes(benchmarks):
    fidelity, _ = benchmarks
    listed = {loop for loop, _axes in fidelity.SEED_LOOPS.values()}
    assert listed == {path.name for path in LOOPS.glob("*.py")}
    for (name, _framework), (loop, axes) in fidelity.SEED_LOOPS.items():
        seed = SEEDS[name].seed
        assert set(axes) <= set(seed), loop
        source = (LOOPS / loop).read_text()
        build = next(
            node
            for node in ast.parse(source).body
            if isinstance(node, ast.FunctionDef) and node.name == "build"
        )
        assert [a.arg for a in build.args.args[1:]] == list(seed), loop


@pytest.mark.parametrize("path", sorted(LOOPS.glob("*.py")), ids=lambda p: p.stem)
def test_a_seed_loop_imports_only_the_plugin_types_of_the_study(path):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("crossover_study"):
            assert node.module == "crossover_study.plugin", path.name
        if isinstance(node, ast.Import):
            assert not any(a.name.startswith("crossover_study") for a in node.names), path.name


@pytest.mark.parametrize(
    "name, framework",
    [
        ("s000-hjb", "torch"),
        ("s000-hjb", "tensorflow"),
        ("s001-mlp", "torch"),
        ("s001-mlp", "tensorflow"),
        ("s002-iris", "tensorflow"),
        ("s004-lstm", "torch"),
        ("s004-lstm", "tensorflow"),
    ],
)
def test_a_seed_loop_runs_in_the_plain_loop_at_a_tiny_size(benchmarks, name, framework):
    fidelity, plain_loop = benchmarks
    path = LOOPS / fidelity.SEED_LOOPS[(name, framework)][0]
    module = plain_loop.load_plugin(str(path))
    sizes = TINY[name]
    assert set(inspect.signature(module.build).parameters) - {"device"} == set(sizes)
    if framework == "torch":
        import torch

        built = module.build(torch.device("cpu"), **sizes)
        plain_loop.step_runner(built, lambda loss: loss.item())(2)
        return
    import tensorflow as tf

    with tf.device("/CPU:0"):
        built = module.build("/CPU:0", **sizes)
        if type(built).__name__ != "KerasFit":
            plain_loop.step_runner(built, lambda loss: loss.numpy())(2)
            return
        call = getattr(module, "FIT_CALL", None)
        run, per_call = plain_loop.keras_runner(built, call)
        run(1)
    # One call of run: the seed's fit call (s002: 20 epochs of 2 steps; s004: one epoch).
    assert int(built.model.optimizer.iterations.numpy()) == per_call
    if name == "s002-iris":
        assert per_call == 40
        assert len(built.model.history.history["val_loss"]) == 20  # validation each epoch
    else:
        assert per_call == 2 and call == {"verbose": 1}
        checkpoint = built.fit["callbacks"][0]
        assert Path(checkpoint.filepath).is_file()  # saved after the epoch
