"""The input of ``crossover-study check`` (:mod:`crossover_study.quickcheck.command`):
its sizes, plug-in file, devices and variants checked and made one validated study
config, the study file of the full sweep, and the check's own output folder. Every bad
input raises :class:`CheckError` with one line naming it, before anything is timed or
written."""

from __future__ import annotations

import ast
import importlib.util
import itertools
import re
import sys
from pathlib import Path

from crossover_study.core.errors import describe_os_error
from crossover_study.study import cases, study_file
from crossover_study.study import config as study_config
from crossover_study.study.applicability import applicability
from crossover_study.study.device_cards import card_files
from crossover_study.study.program_traits import case_kind
from crossover_study.study.spec import (
    DEVICES,
    FRAMEWORKS,
    PLUGIN_VARIANTS,
    REPLICA_VARIANTS,
    VARIANTS,
)

#: The timing of ``--quick`` (tests, a first look): 3 short blocks, little warm-up, no
#: block-length check. Without ``--quick`` the study's defaults (the schema's) apply.
QUICK_TIMING = {
    "min_block_s": 0.01,
    "blocks": 3,
    "max_warmup_s": 0.1,
    "max_point_s": 1.0,
    "sync_check_s": 0.0,
}
#: Modules whose import in a plug-in file names its framework (:func:`plugin_framework`).
FRAMEWORK_MODULES = {"torch": "torch", "tensorflow": "tensorflow", "keras": "tensorflow"}
#: Device classes that need an NVIDIA GPU, with the GPUs they need.
GPU_CLASSES = {"cuda": 1, "cuda_multi": 2}


class CheckError(ValueError):
    """Bad input to the check (one line: the message); exit status 2, nothing timed."""


def parse_sizes(items: list[str]) -> dict[str, int]:
    """``["batch=32", "channels=16"]`` -> ``{"batch": 32, "channels": 16}`` (positive
    integers). Raises :class:`CheckError` naming a malformed or repeated item."""
    sizes: dict[str, int] = {}
    for item in items:
        match = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*)=([0-9]+)", item.strip())
        if not match or int(match[2]) < 1:
            raise CheckError(f"--size {item}: expected AXIS=N with N a positive integer")
        if match[1] in sizes:
            raise CheckError(f"--size {item}: {match[1]} given twice")
        sizes[match[1]] = int(match[2])
    return sizes


def case_name(path: Path) -> str:
    """The case name of plug-in file ``path``: its stem in lower case, ``_`` and other
    characters a case name may not hold as ``-`` (``digits_cnn.py`` -> ``digits-cnn``,
    as ``config/studies/own-models.yaml`` names it)."""
    return re.sub(r"[^a-z0-9.]+", "-", path.stem.lower()).strip("-.") or "case"


def parse_plugin(path: Path, shown: str) -> ast.Module:
    """The syntax tree of plug-in file ``path`` (named ``shown`` in messages), read
    without importing it. Raises :class:`CheckError` naming the real cause: a file that
    is not a ``.py`` file, cannot be read, is not UTF-8 text, or does not parse (``FILE
    line 5: expected ':'``), before anything guesses its framework."""
    if path.suffix != ".py":
        raise CheckError(
            f"{shown}: not a Python file; a plug-in is a .py file defining build(device, "
            f"**sizes) (docs/PLUGINS.md), or give a seed case ({', '.join(cases.SEEDS)})"
        )
    try:
        return ast.parse(path.read_bytes().decode(), filename=shown)
    except SyntaxError as exc:
        raise CheckError(f"{shown} line {exc.lineno}: {exc.msg}") from None
    except UnicodeDecodeError as exc:
        raise CheckError(f"{shown}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except OSError as exc:
        raise CheckError(f"{shown}: cannot be read ({exc.strerror or exc})") from None


def plugin_framework(tree: ast.Module) -> str | None:
    """The framework a plug-in's syntax tree (:func:`parse_plugin`) imports (``torch``;
    ``tensorflow`` or ``keras``: tensorflow), read from its import statements; None when
    it imports neither or both."""
    found = set()
    for node in ast.walk(tree):
        names = (
            [a.name for a in node.names]
            if isinstance(node, ast.Import)
            else [node.module or ""]
            if isinstance(node, ast.ImportFrom)
            else []
        )
        found |= {
            FRAMEWORK_MODULES[n.split(".")[0]]
            for n in names
            if n.split(".")[0] in FRAMEWORK_MODULES
        }
    return found.pop() if len(found) == 1 else None


def present_devices(snapshot: dict | None = None) -> dict[str, str | None]:
    """``{device class: None when present, else why not}`` for :data:`spec.DEVICES`:
    cpu is always present; cuda needs one NVIDIA GPU and cuda_multi two, as NVML or
    nvidia-smi list them (:func:`gpu_state.snapshot`, no framework imported); tpu is
    never found here (a TPU host is asked for with ``--devices tpu``, and its job's
    probe decides)."""
    from crossover_study.measure.gpu_state import snapshot as gpu_snapshot

    snap = snapshot if snapshot is not None else gpu_snapshot()
    gpus = len(snap.get("gpus") or [])
    found: dict[str, str | None] = {"cpu": None}
    for device, needed in GPU_CLASSES.items():
        found[device] = (
            None
            if gpus >= needed
            else f"{gpus} NVIDIA GPU(s) listed, {needed} needed ({snap.get('reason') or 'none'})"
        )
    found["tpu"] = "no TPU is looked for unless asked (--devices tpu)"
    return found


def default_variants(case: str, framework: str, devices: list[str]) -> list[str]:
    """eager and every variant the study derives from the case's step that applies in
    ``framework`` on at least one of ``devices`` (:func:`applicability.applicability`;
    a plug-in's :data:`spec.PLUGIN_VARIANTS`, a seed's every ordinary variant)."""
    pool = PLUGIN_VARIANTS if not cases.get(case).builtin else VARIANTS
    kind = case_kind(case, framework)
    return [
        v
        for v in pool
        if v not in REPLICA_VARIANTS
        and (
            v == "eager" or any(applicability(v, framework, d, kind, case=case)[0] for d in devices)
        )
    ]


def _names(text: str | None, known, what: str, flag: str) -> list[str] | None:
    """A comma-separated ``--devices``/``--variants`` list, each name known."""
    if text is None:
        return None
    names = [n.strip() for n in text.split(",") if n.strip()]
    for name in names:
        if name not in known:
            raise CheckError(f"{flag} {text}: unknown {what} {name!r} (known: {', '.join(known)})")
    if not names:
        raise CheckError(f"{flag}: no {what} given")
    return list(dict.fromkeys(names))


def _cards(text: str | None) -> list[str] | None:
    """``--predict t4,h200`` as card names (``none``: no card; None: the study file's
    default, the schema's), each an existing card. Raises :class:`CheckError` naming
    an unknown card and the cards there are."""
    if text is None:
        return None
    if text.strip() == "none":
        return []
    return _names(text, [p.stem for p in card_files()], "device card", "--predict")


def _case_spec(target: str, framework: str | None, sizes: dict[str, int]):
    """``(case, framework, case entry of the study config)`` of the check's ``target``:
    a seed case at ``sizes`` (its axes), or a plug-in file with ``sizes`` as its seed;
    ``framework``: ``--framework`` (None: the seed's first, or what the file imports).
    Raises :class:`CheckError` for a framework the seed does not run in, a size of no
    axis, a missing file, a file importing neither framework, or a plug-in without
    sizes."""
    if target in cases.SEEDS:
        case = target
        seed = cases.SEEDS[case]
        framework = framework or seed.frameworks[0]
        if framework not in seed.frameworks:
            raise CheckError(
                f"--framework {framework}: {case} runs in {', '.join(seed.frameworks)}"
            )
        for axis in sizes:
            if axis not in seed.axes:
                raise CheckError(
                    f"--size {axis}: {case} has no axis {axis!r} (axes: {', '.join(seed.axes)})"
                )
        spec = {"axes": {a: [v] for a, v in sizes.items()}}
    else:
        path = Path(target)
        if not path.is_file():
            hint = "" if target.endswith(".py") else f" nor a seed case ({', '.join(cases.SEEDS)})"
            raise CheckError(f"{target}: no such plug-in file{hint}")
        case = case_name(path)
        tree = parse_plugin(path, target)  # first: a syntax error is named as such
        framework = framework or plugin_framework(tree)
        if framework is None:
            raise CheckError(
                f"{target}: imports neither torch nor tensorflow/keras alone; give --framework"
            )
        if not sizes:
            raise CheckError(f"{target}: give the sizes its builder takes, e.g. --size batch=32")
        spec = {"workload": str(path.resolve()), "framework": framework, "seed": sizes}
    return case, framework, spec


def build_config(args, study: str) -> tuple[dict, str, list[str], dict[str, str]]:
    """The validated study config of the check, its case, the device classes to measure
    and ``{absent device: why}`` (asked for, or left out of the default, and not found
    by :func:`present_devices`). Raises :class:`CheckError` for every bad input."""
    sizes = parse_sizes(args.size)
    devices = _names(args.devices, DEVICES, "device", "--devices")
    variants = _names(args.variants, VARIANTS, "variant", "--variants")
    predict = _cards(getattr(args, "predict", None))
    if args.framework is not None and args.framework not in FRAMEWORKS:
        raise CheckError(f"--framework {args.framework}: expected one of {', '.join(FRAMEWORKS)}")
    case, framework, spec = _case_spec(args.target, args.framework, sizes)
    if importlib.util.find_spec(framework) is None:
        raise CheckError(f"framework {framework} is not installed in {sys.executable}")
    raw = {
        "study": study,
        "sweep": {"frameworks": [framework], "devices": ["cpu"], "variants": ["eager"]},
        "cases": {case: spec},
    }
    if cases.SEEDS.get(case) is not None and sizes:
        raw["sweep"]["extras_at"] = "all"  # the variants at the sizes given too
    if args.quick:
        raw["timing"] = dict(QUICK_TIMING)
    if predict is not None:
        raw["predict"] = predict
    if getattr(args, "job_deadline", None) is not None:  # checked by the schema below
        raw.setdefault("timing", {})["job_deadline_s"] = args.job_deadline
    try:
        study_config.validate_config(raw)  # the case must be known to list its variants
    except study_file.ConfigError as error:
        raise CheckError(str(error)) from None
    present = present_devices()
    if devices is None:
        devices = [d for d in ("cpu", "cuda") if present[d] is None]
        absent = {d: present[d] for d in ("cuda",) if present[d] is not None}
    else:
        absent = {d: present[d] for d in devices if d in GPU_CLASSES and present[d] is not None}
    raw["sweep"]["devices"] = list(dict.fromkeys([*devices, *absent]))
    raw["sweep"]["variants"] = variants or default_variants(case, framework, devices)
    if "cuda_multi" in raw["sweep"]["devices"]:
        raise CheckError("--devices cuda_multi: a check measures no replicated points; use a study")
    try:
        config = study_config.validate_config(raw)
    except study_file.ConfigError as error:
        raise CheckError(str(error)) from None
    return config, case, [d for d in raw["sweep"]["devices"] if d not in absent], absent


def sweep_study(config: dict, case: str, name: str) -> dict:
    """The study file of the full sweep for a crossover of ``case``: each axis at a
    quarter, 1, 4 and 16 times its size, on cpu and cuda, the check's variants and every
    one that applies on cpu or cuda (:func:`default_variants`) at the seed's size
    (``extras_at: seed``), the study's default timing."""
    spec = dict(config["cases"][case])
    seed = spec.get("seed") or cases.seed_sizes(case)
    axes = {a: sorted({max(1, v // 4), v, 4 * v, 16 * v}) for a, v in seed.items()}
    entry = {
        **{k: spec[k] for k in ("workload", "framework", "seed", "entry") if k in spec},
        "axes": axes,
    }
    return {
        "study": name,
        "sweep": {
            "frameworks": config["sweep"]["frameworks"],
            "devices": ["cpu", "cuda"],
            # The check's variants and every one that applies on cpu or cuda.
            "variants": list(
                dict.fromkeys(
                    [
                        *config["sweep"]["variants"],
                        *default_variants(case, config["sweep"]["frameworks"][0], ["cpu", "cuda"]),
                    ]
                )
            ),
            "extras_at": "seed",
        },
        "devices": {"cpu": {"threads": 2}, "cuda": {"threads": 2, "gpu": 1}},
        "cases": {case: entry},
    }


def claim_folder(given: str | None, study: str, results: Path = Path("results")) -> Path:
    """The check's own output folder, created here (absolute): ``given`` (``--out``),
    which must not exist yet, else ``results/<study>``, or ``results/<study>-2``, ``-3``,
    ... when a check started in the same second took that name. Each name is claimed
    with one ``mkdir`` that fails when the folder exists (atomic), so two checks never
    share a folder, however close together they start. Raises :class:`CheckError` when
    ``given`` exists, or names a path where no folder can be made (the cause in words)."""
    if given is not None:
        try:
            Path(given).mkdir(parents=True)
        except FileExistsError:
            raise CheckError(
                f"--out {given} exists: a check never writes into a folder used before; "
                "give a new one (or leave --out out: results/check-<case>-<UTC time>/)"
            ) from None
        except OSError as exc:
            raise CheckError(
                f"--out {given}: cannot make the folder: {describe_os_error(exc)}"
            ) from None
        return Path(given).resolve()
    for n in itertools.count(1):
        folder = results / (study if n == 1 else f"{study}-{n}")
        try:
            folder.mkdir(parents=True)
        except FileExistsError:
            continue
        except OSError as exc:
            raise CheckError(f"cannot make {folder}: {describe_os_error(exc)}") from None
        return folder.resolve()
    raise AssertionError("unreachable")
