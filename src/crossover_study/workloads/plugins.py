"""Loading a case of the user's own: its plug-in file, its entry point, its program.

The file is imported once per process (a module named after the case), the entry point
looked up in it, and for each point either the workload class it is (the harness's
:class:`~crossover_study.measure.harness.Workload` contract: ``Class(device, sizes, variant)``)
is instantiated, or the builder function it is (``build(device, **sizes)``, returning a
:mod:`crossover_study.plugin` program) is wrapped in the framework's adapter:
:class:`~crossover_study.workloads.plugin_torch.TorchPluginWorkload` or
:class:`~crossover_study.workloads.plugin_tf.TFPluginWorkload`. Nothing is built here;
the builder runs in the workload's ``setup`` (timed as cold start).
"""

from __future__ import annotations

import importlib.util
import inspect
import re
import sys
from pathlib import Path

from crossover_study.core.files import sha256_file
from crossover_study.study.cases import Case

_loaded: dict[tuple[str, str], object] = {}


def load_entry(case: Case, framework: str):
    """The entry point of ``case`` in ``framework``: its plug-in file imported as module
    ``crossover_plugin_<case>`` (once per file content in this process) and the entry
    point's name looked up in it. Raises whatever importing the file raises (the runner
    records it in the point's ``message``) and AttributeError naming the file when the
    name is missing."""
    path = case.plugin_file(framework)
    _, name = case.entry_point(framework)
    key = (str(path), sha256_file(path))
    module = _loaded.get(key)
    if module is None:
        module_name = "crossover_plugin_" + re.sub(r"\W", "_", case.name)
        spec = importlib.util.spec_from_file_location(module_name, path)
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot import {path} as a Python module")
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module  # dataclasses and pickling look it up there
        try:
            spec.loader.exec_module(module)
        except BaseException:
            sys.modules.pop(module_name, None)
            raise
        _loaded[key] = module
    try:
        return getattr(module, name)
    except AttributeError:
        raise AttributeError(
            f"{Path(path).name} has no {name!r} (cases.{case.name}.entry)"
        ) from None


def plugin_workload(case: Case, framework: str, device: str, sizes: dict, variant: str):
    """The workload of one point of plug-in ``case``: the entry point's class
    instantiated with ``(device, sizes, variant)``, or its builder wrapped in the
    framework's adapter (which raises ``workloads.NotApplicable`` for a variant it
    cannot derive). Imports the framework and the plug-in file."""
    entry = load_entry(case, framework)
    if inspect.isclass(entry):
        return entry(device, dict(sizes), variant)
    if not callable(entry):
        raise TypeError(f"the entry point of {case.name} is a {type(entry).__name__}, not callable")
    if framework == "torch":
        from crossover_study.workloads.plugin_torch import TorchPluginWorkload

        return TorchPluginWorkload(entry, device, sizes, variant)
    from crossover_study.workloads.plugin_tf import TFPluginWorkload

    return TFPluginWorkload(entry, device, sizes, variant)
