"""The case registry: every case a study measures, the four seeds and the user's own.

A *case* is a plug-in: a name, the question it asks, its seed size (the user's own
size, always measured; the order of its axes is the order of ``seed``), and per
framework the *entry point* that builds its training program. There are two kinds of
entry point (``docs/PLUGINS.md`` and ``examples/`` show both):

- a **builder function** ``build(device, **sizes)`` in a Python file of the user's,
  returning one training step and the data it needs (:mod:`crossover_study.plugin`:
  ``TorchStep``, ``TFStep``, ``KerasFit``); the library builds the timeable program from
  it, remedies included (:mod:`crossover_study.workloads.plugin_torch`,
  :mod:`~crossover_study.workloads.plugin_tf`);
- a **workload class** ``Class(device, sizes, variant)`` following the harness's
  :class:`~crossover_study.measure.harness.Workload` contract (``setup``, ``run``, ``sync``,
  ``loss``), as the four seeds do (``crossover_study.workloads.torch_cases`` and
  ``tf_cases``).

The seeds are declared in :data:`SEEDS` with the same :class:`Case` a study file's own
case becomes (:func:`plugin_case`); nothing else in the library lists case names, seed
sizes or size columns. A study's cases are made the active registry by
:func:`use` (``config.validate_config`` calls it), so that the workflow, its jobs and
the report all see the same cases.

Plug-in files are checked statically here (parsed with :mod:`ast`, never imported), so a
missing file, a misspelled entry point or an axis the entry point does not accept stops
``snakemake -n`` with one line naming the case and the key, without importing torch or
TensorFlow.
"""

from __future__ import annotations

import ast
import contextlib
import difflib
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from crossover_study.core.files import sha256_file
from crossover_study.core.paths import REPO_ROOT
from crossover_study.plugin import KerasFit, pinned_arguments
from crossover_study.study.seed_devices import SEED_DEVICES, OwnDevice

#: The entry point a plug-in case's file exposes when the study file names none.
DEFAULT_ENTRY = "build"
#: The parameter of a builder function that receives the device.
DEVICE_PARAMETER = "device"


class PluginError(ValueError):
    """A case's plug-in is unusable; the message names the case and the config key
    (``cases.<name>.<key>``) in one line."""


@dataclass(frozen=True)
class Case:
    """One case of the registry.

    ``seed`` maps each size axis to the seed's own value (positive ints; samples for
    ``batch``), in the order the report uses. ``entry_points`` maps each framework that
    runs the case (``torch``, ``tensorflow``) to ``"<module>:<name>"`` (a built-in
    workload class, imported from the package) or to ``"<file>:<name>"`` (a plug-in
    file: a path relative to the repository root, or absolute outside it). ``builtin``
    is True for the four seeds. The capability flags say which seed-specific programs
    exist: ``lstm`` (its jobs warm the LSTM path; ``cudnn``/``generic`` apply),
    ``keras_fit`` (the Keras rows are ``fit`` programs), ``replicas`` (the replication
    section measures it) and ``fit_replicas`` (``mirrored_fit`` applies). ``assumption``
    is what the case assumes where its seed is silent (shown beside its answer).
    """

    name: str
    question: str
    seed: Mapping[str, int]
    entry_points: Mapping[str, str]
    builtin: bool = False
    lstm: bool = False
    keras_fit: bool = False
    replicas: bool = False
    fit_replicas: bool = False
    assumption: str | Callable[[], str] | None = None
    #: The accelerators the seed's user measured it on (:class:`OwnDevice`).
    own_devices: tuple[OwnDevice, ...] = ()
    #: Data files the case reads from an installed distribution, recorded in the
    #: manifest: (name, distribution, path in the distribution's RECORD).
    package_data: tuple[tuple[str, str, str], ...] = ()

    @property
    def axes(self) -> tuple[str, ...]:
        """Size axes in report order (the keys of ``seed``)."""
        return tuple(self.seed)

    @property
    def frameworks(self) -> tuple[str, ...]:
        """Frameworks that run the case."""
        return tuple(self.entry_points)

    def entry_point(self, framework: str) -> tuple[str, str]:
        """(module or file, name) of ``framework``'s entry point. Raises KeyError naming
        the frameworks the case has."""
        try:
            target = self.entry_points[framework]
        except KeyError:
            raise KeyError(
                f"case {self.name} runs in {', '.join(self.frameworks)}, not {framework}"
            ) from None
        where, _, name = target.rpartition(":")
        return where, name

    def plugin_file(self, framework: str | None = None) -> Path | None:
        """The plug-in file of ``framework`` (the case's only framework when None), as an
        absolute path; None for a built-in case."""
        if self.builtin:
            return None
        where, _ = self.entry_point(framework or self.frameworks[0])
        return resolve_stored(where)

    def assumption_text(self) -> str | None:
        """What the case assumes where its seed is silent (``assumption``, computed when
        it is a function), or None."""
        return self.assumption() if callable(self.assumption) else self.assumption


def _lstm_assumption() -> str:
    from crossover_study.study.seed_data import LSTM_TRAIN_SAMPLES, lstm_steps_per_epoch

    seed = SEEDS_SIZES_S004
    return (
        "The seed gives neither its data nor its window length. The study assumes the "
        f"stock-price tutorial its code follows: {LSTM_TRAIN_SAMPLES:,} training windows "
        f"of {seed['seq_len']} time steps (seeded synthetic series, 3 features "
        f"\u2192 4 targets), i.e. {lstm_steps_per_epoch(seed['batch'])} steps per "
        f"epoch at batch {seed['batch']}; each fit epoch ends with a ModelCheckpoint of "
        "the whole model and the progress bar is drawn, as in the seed."
    )


def _seed_entry_points(torch_class: str, tf_class: str) -> dict[str, str]:
    return {
        "torch": f"crossover_study.workloads.torch_cases:{torch_class}",
        "tensorflow": f"crossover_study.workloads.tf_cases:{tf_class}",
    }


#: s004's seed size (its sequence length is not in the seed: 60 time steps is the usual
#: window of the stock-price LSTM tutorials its code follows, and the design card makes
#: T an axis).
SEEDS_SIZES_S004 = {"batch": 32, "units": 180, "seq_len": 60}

#: The four seed cases (``docs/STUDY.md``; originals in ``docs/seeds/``), declared as
#: plug-ins whose entry points are the built-in workload classes.
SEEDS: dict[str, Case] = {
    case.name: case
    for case in (
        Case(
            name="s000-hjb",
            question="TF2 custom loop: GPU slower than CPU for a tiny HJB value-function net",
            seed={"batch": 100, "width": 8},
            entry_points=_seed_entry_points("HJB", "HJB"),
            builtin=True,
            own_devices=SEED_DEVICES["s000-hjb"],
        ),
        Case(
            name="s001-mlp",
            question="PyTorch MLP: GPU slower than CPU on Colab",
            seed={"batch": 64, "d_in": 1024, "hidden": 128},
            entry_points=_seed_entry_points("MLP", "MLP"),
            builtin=True,
            replicas=True,
            own_devices=SEED_DEVICES["s001-mlp"],
        ),
        Case(
            name="s002-iris",
            question="Keras Iris model: TPU slower than CPU",
            seed={"batch": 20, "hidden": 32},
            entry_points=_seed_entry_points("Iris", "Iris"),
            builtin=True,
            keras_fit=True,
            package_data=(("iris.csv", "scikit-learn", "sklearn/datasets/data/iris.csv"),),
            own_devices=SEED_DEVICES["s002-iris"],
        ),
        Case(
            name="s004-lstm",
            question="Keras LSTM: several GPUs no faster than one",
            seed=SEEDS_SIZES_S004,
            entry_points=_seed_entry_points("LSTM", "LSTM"),
            builtin=True,
            lstm=True,
            keras_fit=True,
            replicas=True,
            fit_replicas=True,
            assumption=_lstm_assumption,
            own_devices=SEED_DEVICES["s004-lstm"],
        ),
    )
}

_active: dict[str, Case] = dict(SEEDS)


def use(config: Mapping) -> dict[str, Case]:
    """Make the cases of a validated study ``config`` (its ``cases`` section) the active
    registry, after the seeds: a plug-in case of the config is added
    (:func:`plugin_case`), a plug-in case of an earlier config is dropped. Returns the
    active registry (name -> Case). Raises :class:`PluginError` for a plug-in entry
    that is not a validated one (no ``workload``/``framework``/``seed``)."""
    global _active
    registry = dict(SEEDS)
    for name, spec in (config.get("cases") or {}).items():
        if name not in SEEDS:
            registry[name] = plugin_case(name, spec)
    _active = registry
    return dict(_active)


@contextlib.contextmanager
def kept() -> Iterator[None]:
    """Put the active registry back when the block ends, whatever :func:`use` did inside
    it (auditing another run makes that run's cases active for a while)."""
    global _active
    saved = _active
    try:
        yield
    finally:
        _active = saved


def names() -> tuple[str, ...]:
    """Names of the active cases: the seeds, then the plug-ins in config order."""
    return tuple(_active)


def get(name: str) -> Case:
    """The active case called ``name``. Raises KeyError naming the known cases (a
    plug-in case is known once its study config was loaded: :func:`use`)."""
    try:
        return _active[name]
    except KeyError:
        raise KeyError(
            f"unknown case {name!r}: the seeds are {', '.join(SEEDS)}; a case of your own "
            "is known once its study config is loaded (crossover_study.study.cases.use)"
        ) from None


def seed_sizes(name: str) -> dict[str, int]:
    """The seed size of case ``name`` (axis -> value, report order)."""
    return dict(get(name).seed)


def axes(name: str) -> tuple[str, ...]:
    """Size axes of case ``name`` in report order."""
    return get(name).axes


def with_flag(flag: str) -> tuple[str, ...]:
    """Names of the active cases whose capability ``flag`` (``lstm``, ``keras_fit``,
    ``replicas``, ``fit_replicas``) is set."""
    return tuple(n for n, c in _active.items() if getattr(c, flag))


def question(name: str) -> str:
    """The question case ``name`` asks (the report's section heading)."""
    return get(name).question


def plugin_case(name: str, spec: Mapping) -> Case:
    """The :class:`Case` of a study file's own case ``name`` from its validated config
    entry (``workload``: the resolved file, ``framework``, ``question``, ``seed``,
    optional ``entry``). Raises :class:`PluginError` for a missing key."""
    for key in ("workload", "framework", "seed"):
        if key not in spec:
            raise PluginError(f"config error at cases.{name}: {key} is missing")
    entry = spec.get("entry", DEFAULT_ENTRY)
    return Case(
        name=name,
        question=spec.get("question") or f"{name}: is the accelerator worth it?",
        seed=dict(spec["seed"]),
        entry_points={spec["framework"]: f"{spec['workload']}:{entry}"},
    )


# --- Static checks of a plug-in file (config validation) -------------------------------


def resolve_workload(name: str, workload: str, search: Iterable[Path]) -> Path:
    """The plug-in file ``workload`` of case ``name``: an absolute path, or the first of
    ``search`` (the study file's folder, then the repository) that holds it. Raises
    :class:`PluginError` (``cases.<name>.workload``) when none does."""
    path = Path(workload)
    candidates = [path] if path.is_absolute() else [Path(d) / path for d in search]
    for candidate in candidates:
        if candidate.is_file():
            return candidate.resolve()
    looked = ", ".join(dict.fromkeys(str(c.resolve()) for c in candidates)) or workload
    raise PluginError(
        f"config error at cases.{name}.workload: plug-in file {workload!r} not found "
        f"(looked for {looked})"
    )


def stored_path(path: Path) -> str:
    """How the resolved config stores a plug-in file: relative to the repository root
    when inside it, else relative to the working directory (Snakemake's, where every job
    runs) when inside that, else absolute (a machine path, which the audit fails: keep
    a plug-in in the repository or the working directory)."""
    path = Path(path).resolve()
    for base in (REPO_ROOT.resolve(), Path.cwd().resolve()):
        if path.is_relative_to(base):
            return path.relative_to(base).as_posix()
    return str(path)


def resolve_stored(stored: str | Path) -> Path:
    """The absolute path of a plug-in file as :func:`stored_path` stored it: absolute as
    it is; relative, under the repository root when the file is there, else under the
    working directory."""
    path = Path(stored)
    if path.is_absolute():
        return path
    in_repo = REPO_ROOT / path
    return in_repo if in_repo.is_file() else Path.cwd() / path


def _parse(name: str, path: Path) -> ast.Module:
    try:
        return ast.parse(path.read_text(), filename=str(path))
    except SyntaxError as exc:
        raise PluginError(
            f"config error at cases.{name}.workload: {stored_path(path)} does not parse "
            f"(line {exc.lineno}: {exc.msg})"
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise PluginError(
            f"config error at cases.{name}.workload: cannot read {stored_path(path)} ({exc})"
        ) from None


def _top_level(tree: ast.Module) -> dict[str, ast.AST]:
    """Functions, classes and names assigned at the top level of a module."""
    found: dict[str, ast.AST] = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            found[node.name] = node
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    found[target.id] = node
        elif isinstance(node, ast.ImportFrom | ast.Import):
            for alias in node.names:
                found[(alias.asname or alias.name).split(".")[0]] = node
    return found


def _parameters(func: ast.FunctionDef | ast.AsyncFunctionDef) -> tuple[list, list, bool]:
    """(parameters that can be given by keyword, those of them without a default,
    whether the function takes ``**kwargs``)."""
    args = func.args
    positional = [*args.posonlyargs, *args.args]
    by_keyword = [a.arg for a in args.args] + [a.arg for a in args.kwonlyargs]
    n_defaults = len(args.defaults)
    required = [a.arg for a in positional[: len(positional) - n_defaults]]
    required += [a.arg for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True) if d is None]
    posonly = {a.arg for a in args.posonlyargs}
    return [p for p in by_keyword if p not in posonly], required, args.kwarg is not None


def check_plugin(name: str, path: Path, entry: str, axes_: Iterable[str]) -> str:
    """Check plug-in file ``path`` of case ``name`` without importing it: it parses, it
    defines ``entry`` at its top level, ``entry`` accepts the case's axes, and no
    ``KerasFit`` in it sets a ``compile`` or ``fit`` key the study pins
    (:func:`crossover_study.plugin.pinned_arguments`: ``fit={"epochs": 5}`` is refused
    here once, not on every point).

    A builder function must take ``device`` and every axis as keyword arguments (or
    ``**kwargs``) and require nothing else; a workload class must take ``(device,
    sizes, variant)`` (its ``__init__``, when it defines one). Returns ``"function"`` or
    ``"class"``. Raises :class:`PluginError` naming ``cases.<name>.workload``,
    ``cases.<name>.entry`` or ``cases.<name>.axes.<axis>``.
    """
    tree = _parse(name, path)
    top = _top_level(tree)
    node = top.get(entry)
    shown = stored_path(path)
    if node is None:
        candidates = [
            n
            for n, v in top.items()
            if isinstance(v, ast.FunctionDef | ast.ClassDef) and not n.startswith("_")
        ]
        close = difflib.get_close_matches(entry, candidates, n=1)
        hint = (
            f" (it defines {close[0]!r}: rename it to {entry!r}, or set "
            f"cases.{name}.entry: {close[0]})"
            if close
            else ""
        )
        listed = f"; it defines {', '.join(sorted(candidates))}" if candidates else ""
        raise PluginError(
            f"config error at cases.{name}.entry: {shown} defines no function or class "
            f"{entry!r} at its top level{hint}{listed}"
        )
    if isinstance(node, ast.ClassDef):
        init = next(
            (n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"),
            None,
        )
        if init is not None:
            params = [a.arg for a in [*init.args.posonlyargs, *init.args.args]][1:]
            if len(params) < 3 and init.args.vararg is None:
                raise PluginError(
                    f"config error at cases.{name}.entry: workload class {entry} in {shown} "
                    f"must take (device, sizes, variant), its __init__ takes ({', '.join(params)})"
                )
        return "class"
    if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
        raise PluginError(
            f"config error at cases.{name}.entry: {entry!r} in {shown} is not a function or "
            "class defined with def/class at the top level"
        )
    keywords, required, any_keyword = _parameters(node)
    wanted = [DEVICE_PARAMETER, *axes_]
    signature = f"{entry}({', '.join(keywords)}{', **kwargs' if any_keyword else ''})"
    for axis in wanted:
        if axis not in keywords and not any_keyword:
            where = (
                f"cases.{name}.axes.{axis}" if axis != DEVICE_PARAMETER else f"cases.{name}.entry"
            )
            raise PluginError(
                f"config error at {where}: {signature} in {shown} takes no parameter "
                f"{axis!r} (a builder takes device and every axis of the case by keyword)"
            )
    for param in required:
        if param not in wanted:
            raise PluginError(
                f"config error at cases.{name}.entry: {signature} in {shown} requires "
                f"{param!r}, which is neither device nor an axis of {name} "
                f"({', '.join(axes_) or 'none'}); give it a default or make it an axis"
            )
    for line, argument, key in pinned_arguments(tree):
        pinned = KerasFit.PINNED_FIT if argument == "fit" else KerasFit.PINNED_COMPILE
        raise PluginError(
            f"config error at cases.{name}.workload: {shown} line {line}: KerasFit's "
            f"{argument} sets {key!r}, which the study pins ({', '.join(pinned)}: every "
            f"device runs the same program); leave it out of {argument}"
        )
    return "function"


def workload_file(name: str, framework: str) -> Path:
    """The file that defines case ``name``'s program in ``framework``: its plug-in file,
    or for a seed the module of its workload class (``src/crossover_study/workloads/
    torch_cases.py`` or ``tf_cases.py``). Absolute path."""
    case = get(name)
    if not case.builtin:
        return case.plugin_file(framework)
    module, _ = case.entry_point(framework)
    return REPO_ROOT / "src" / Path(*module.split(".")).with_suffix(".py")


def workload_provenance(name: str, framework: str) -> dict[str, str | None]:
    """The row columns that say which file defined a point's program: ``workload_file``
    (repository-relative when inside it) and its ``workload_sha256``; both None when
    the case does not run in ``framework``."""
    try:
        path = workload_file(name, framework)
    except KeyError:
        return {"workload_file": None, "workload_sha256": None}
    return {"workload_file": stored_path(path), "workload_sha256": sha256_file(path)}
