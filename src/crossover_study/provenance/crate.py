"""A Workflow Run RO-Crate of one study run, written with the ``rocrate`` library.

``results/<study>/ro-crate-metadata.json`` describes the run of the workflow in the
terms of the Workflow Run Crate profile (https://w3id.org/ro/wfrun/workflow/0.6) and
RO-Crate 1.3. The crate's root is the study's results folder, and its data entities
(``File``) are the files inside that folder only, with ids relative to it, so a
results folder means the same wherever it is copied (a reference run under
``results/reference/<name>/``):

- the tables, per-job tables, probe records, ``config.resolved.yaml`` and
  ``manifest.json``;
- ``code/``: a copy of the workflow's definition as it ran (``code/Snakefile`` and
  ``code/workflow/rules/*.smk``, the repository's paths under ``code/``), whose sha256
  are the manifest's ``code`` records; the main entity is ``code/Snakefile``
  (``ComputationalWorkflow``, version = git commit). The library code it imports
  (``src/``, ``workflow/scripts/``) is not copied: the manifest hashes every file of it
  and names the commit.

Files that lie outside the folder (the report and its figures, the study's config
files, the reference runs' tables the report drew, data shipped inside an installed
package) are contextual entities (``CreativeWork``) whose ``@id`` names where they
are, never a machine's absolute path (:func:`outside_id`):
``#workdir:<path>`` relative to the working directory the run used (the repository
root under ``make study``), ``#repo:<path>`` relative to the repository,
``#package:<distribution>==<version>:<path in the distribution>`` inside an installed
package, ``#outside:<file name>`` for a file that lay elsewhere. Each carries its
``contentSize`` and ``identifier`` ``sha256:<hex>``; ``make audit`` resolves and hashes
them (:mod:`crossover_study.audit.verify`).

Everything is read from the study's manifest (:mod:`crossover_study.provenance.manifest`):

- one ``CreateAction`` is the workflow run: config in, tables, report, figures and
  manifest out;
- one ``CreateAction`` per measuring run (``run_id``): its instrument is the framework
  (``SoftwareApplication`` with its version and URL, and Python and CUDA as software
  requirements), its ``location`` the machine (host, CPU model, device name), its
  result the per-job table(s), and probe records are ``about`` it;
- each figure ``isBasedOn`` the tables it was drawn from (its recorded sources: the
  study's tables and, for the cross-machine figures, the reference runs' tables
  recorded under ``reference_tables``) and the per-job tables of the runs of its case;
  ``timings.csv`` is based on the per-job tables, ``crossover.csv`` on
  ``timings.csv``.

Which files lie inside the crate, the ids of those outside and the copy of the
workflow's definition are :mod:`crossover_study.provenance.crate_files`'s. :mod:`crossover_study.provenance.crate_validation` checks a crate with ``roc-validator``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path

from crossover_study.core.columns import STUDY_TABLES
from crossover_study.core.paths import REPO_ROOT
from crossover_study.provenance.crate_files import (
    CODE_DIR,
    WORKFLOW_FILES,
    copy_workflow,
    crate_path,
    outside_id,
    outside_where,
)
from crossover_study.provenance.inputs import file_record
from crossover_study.provenance.manifest import write_json
from crossover_study.study import cases as case_registry

#: The public names, those of :mod:`crossover_study.provenance.crate_files` included (callers
#: import them from here).
__all__ = [
    "CRATE_NAME",
    "PROFILES",
    "SOFTWARE_URLS",
    "build_crate",
    "write_crate",
]

CRATE_NAME = "ro-crate-metadata.json"
PROFILES: tuple[tuple[str, str, str], ...] = (
    ("https://w3id.org/ro/wfrun/process/0.6", "Process Run Crate", "0.6"),
    ("https://w3id.org/ro/wfrun/workflow/0.6", "Workflow Run Crate", "0.6"),
)
#: Home pages of the software a run names (RO-Crate 1.2+: a SoftwareApplication has a
#: ``url``); unknown names get PyPI's page.
SOFTWARE_URLS = {
    "torch": "https://pytorch.org/",
    "tensorflow": "https://www.tensorflow.org/",
    "python": "https://www.python.org/",
    "cuda": "https://developer.nvidia.com/cuda-toolkit",
    "scikit-learn": "https://scikit-learn.org/",
}
_FORMATS = {
    ".csv": "text/csv",
    ".json": "application/json",
    ".png": "image/png",
    ".svg": "image/svg+xml",
    ".pdf": "application/pdf",
    ".html": "text/html",
    ".ipynb": "application/x-ipynb+json",
    ".yaml": "application/yaml",
    ".smk": "text/x-snakemake",
}


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9.]+", "-", str(text)).strip("-").lower() or "unknown"


class _Crate:
    """The crate being built and what its parts share: the crate's folder, the results
    folder the manifest's paths start with, and the software and machines added once."""

    def __init__(self, manifest: Mapping, crate_dir: Path):
        from rocrate.rocrate import ROCrate

        self.crate = ROCrate()
        self.results_dir = manifest["results_dir"]
        self.crate_dir = crate_dir
        self.software: dict[tuple[str, str], object] = {}
        self.machines: dict[tuple[str, str, str], object] = {}

    def entity(self, identifier: str, properties: dict):
        """A context entity ``identifier`` with ``properties``, added."""
        from rocrate.model.contextentity import ContextEntity

        return self.crate.add(ContextEntity(self.crate, identifier, properties=properties))

    def inside(self, name: str) -> dict:
        """The record of a file of the crate's folder, as if the manifest held it."""
        record = file_record(self.crate_dir / name, self.crate_dir)
        return {**record, "path": f"{self.results_dir}/{name}"}

    def file(self, record: Mapping, name: str, **extra):
        """A file of the run: a ``File`` inside the crate, else an outside entity;
        ``extra``: its links (entities become ``{"@id": ...}``)."""
        suffix = Path(record["path"]).suffix
        props = {
            "name": name,
            "contentSize": str(record["bytes"]),
            "identifier": f"sha256:{record['sha256']}",
            **({"encodingFormat": _FORMATS[suffix]} if suffix in _FORMATS else {}),
        }
        inside = crate_path(record, self.results_dir)
        if inside is not None:
            entity = self.crate.add_file(dest_path=inside, properties=props)
        else:
            props.update(
                {
                    "@type": "CreativeWork",
                    "description": f"not in this crate: {outside_where(record)}",
                }
            )
            entity = self.entity(outside_id(record), props)
        for key, value in extra.items():
            entity[key] = value
        return entity

    def app(self, name: str, version: str | None):
        """The ``SoftwareApplication`` of ``name`` at ``version`` (added once)."""
        key = (name, str(version))
        if key not in self.software:
            self.software[key] = self.entity(
                f"#software-{_slug(name)}-{_slug(version)}",
                {
                    "@type": "SoftwareApplication",
                    "name": name,
                    "softwareVersion": str(version),
                    "version": str(version),
                    "url": SOFTWARE_URLS.get(name, f"https://pypi.org/project/{name}/"),
                },
            )
        return self.software[key]

    def machine(self, run: Mapping):
        """The ``Place`` a measuring run ran on: its host, CPU and device (added once),
        with its details as ``PropertyValue``\\ s."""
        key = (str(run.get("host")), str(run.get("cpu_model")), str(run.get("device_name")))
        if key not in self.machines:
            host, cpu, device = key
            details = {
                "host": host,
                "node": run.get("node"),
                "partition": run.get("partition"),
                "cpu_model": cpu,
                "device_name": device,
            }
            values = [
                self.entity(
                    f"#machine-{_slug(host)}-{_slug(device)}-{name}",
                    {"@type": "PropertyValue", "name": name, "value": str(value)},
                )
                for name, value in details.items()
                if value not in (None, "None", "nan", "")
            ]
            self.machines[key] = self.entity(
                f"#machine-{_slug(host)}-{_slug(device)}",
                {
                    "@type": "Place",
                    "name": f"{host}: {device}",
                    "description": f"host {host}, CPU {cpu}, device {device}",
                    "additionalProperty": values,
                },
            )
        return self.machines[key]


def build_crate(
    manifest: Mapping,
    workdir: str | Path,
    repo: str | Path = REPO_ROOT,
    manifest_path: str | Path | None = None,
    crate_dir: str | Path | None = None,
):
    """The Workflow Run Crate of the run described by ``manifest`` (a ``rocrate``
    ``ROCrate``; not written). ``workdir`` is the working directory the manifest's paths
    are relative to; the crate's folder ``crate_dir`` (default
    ``<workdir>/<results_dir>``; a frozen copy's folder otherwise) holds the workflow's
    copy (:func:`copy_workflow`) and may hold ``config.resolved.yaml``; with
    ``manifest_path`` (the manifest file, in ``crate_dir``) the manifest is added as a
    file about the workflow run. Raises KeyError for a manifest without the study
    layout."""
    workdir = Path(workdir).resolve()
    crate_dir = (
        Path(crate_dir).resolve() if crate_dir is not None else workdir / manifest["results_dir"]
    )
    c = _Crate(manifest, crate_dir)
    _describe_root(c, manifest)
    workflow = _add_workflow(c, manifest)
    configs, data, plugins = _add_inputs(c, manifest)
    points, runs_by_case = _add_measuring_runs(c, manifest, [*configs, *plugins])
    outputs = _add_outputs(c, manifest, points, runs_by_case)
    study = manifest["study"]
    run = c.crate.add_action(
        workflow,
        identifier=f"#workflow-run-{_slug(study)}",
        object=[*configs, *data, *plugins],
        result=outputs,
        properties={
            "@type": "CreateAction",
            "name": f"crossover-study run of study {study}",
            "endTime": manifest["created_utc"],
            **(
                {"startTime": min(r["first_utc"] for r in manifest["runs"] if r.get("first_utc"))}
                if any(r.get("first_utc") for r in manifest["runs"])
                else {}
            ),
        },
    )
    c.crate.root_dataset.append_to("mentions", run)
    if manifest_path is not None:
        c.file(
            c.inside(Path(manifest_path).name),
            "manifest.json: sha256 of every input and output, package versions, git state",
            about=run,
        )
    return c.crate


def _describe_root(c: _Crate, manifest: Mapping) -> None:
    """The root dataset's name, description (what is inside, how files elsewhere are
    named), date and license."""
    study = manifest["study"]
    root = c.crate.root_dataset
    root["name"] = f"crossover-study: run of study {study}"
    root["description"] = (
        f"Results of the crossover study {study!r}: where the accelerator overtakes the "
        "CPU for small networks, with the runs, machines and software they came from. "
        "Its files are the ones inside this folder. Files that lie elsewhere are named, "
        "not included: an @id '#workdir:<path>' is a path relative to the working "
        "directory of the run (the repository root under `make study`), '#repo:<path>' "
        "relative to the repository, '#package:<distribution>==<version>:<path>' a file "
        "inside that installed distribution, '#outside:<name>' a file that lay elsewhere "
        "(its name only); each carries its sha256, and `make audit` resolves and hashes "
        "them. code/ holds a copy of the workflow definition that ran."
    )
    if manifest.get("runner"):  # measured without Snakemake (the GPU reference run)
        root["description"] += (
            f" Measured by {manifest['runner']['name']}: the measuring jobs the workflow's "
            "measure rule runs, started one by one without Snakemake; the report is not "
            "part of this run."
        )
    root["datePublished"] = manifest["created_utc"]
    root["license"] = c.entity(
        "https://spdx.org/licenses/MIT", {"@type": "CreativeWork", "name": "MIT License"}
    )


def _add_workflow(c: _Crate, manifest: Mapping):
    """The workflow (prospective): the crate's copy of the Snakefile
    (:func:`copy_workflow`, hashed as the manifest recorded) with its rules as parts, and
    the profiles the crate conforms to. Returns the workflow's entity."""
    snakefile = next(r for r in manifest["code"] if r["path"] == "Snakefile")
    git = manifest["git"]
    workflow = c.crate.add_workflow(
        dest_path=f"{CODE_DIR}/Snakefile",
        main=True,
        lang="snakemake",
        lang_version=manifest.get("snakemake_version"),
        properties={
            "name": "crossover-study",
            "version": git["commit"],
            "identifier": f"sha256:{snakefile['sha256']}",
            "runtimePlatform": f"Snakemake {manifest.get('snakemake_version')}",
            "description": (
                "A copy of the workflow's Snakefile as it ran (its rules beside it under "
                "code/workflow/rules/), from git commit "
                f"{git['commit']}{' (dirty)' if git['dirty'] else ''}"
                "; manifest.json hashes every file of the code it imports."
            ),
        },
    )
    workflow["hasPart"] = [
        c.file(
            {**r, "root": "workdir", "path": f"{c.results_dir}/{CODE_DIR}/{r['path']}"},
            f"workflow rules {Path(r['path']).name} (copy)",
        )
        for r in manifest["code"]
        if r["root"] == "repo" and WORKFLOW_FILES.match(r["path"]) and r["path"] != "Snakefile"
    ]
    for profile_id, name, version in PROFILES:
        profile = c.entity(
            profile_id, {"@type": ["CreativeWork", "Profile"], "name": name, "version": version}
        )
        c.crate.root_dataset.append_to("conformsTo", profile)
    return workflow


def _add_inputs(c: _Crate, manifest: Mapping) -> tuple[list, list, list]:
    """``(configs, data, plugins)``: the entities of the study's config files (and the
    config as validated, where written beside the manifest), its data files (part of
    their package where one holds them) and the cases' plug-in files."""
    configs = [
        c.file(r, f"study config {Path(r['path']).name}") for r in manifest["config"]["files"]
    ]
    resolved = c.crate_dir / "config.resolved.yaml"
    if resolved.is_file():  # written beside the manifest by the manifest job
        configs.append(
            c.file(
                c.inside(resolved.name), "the study's config as validated, every default filled in"
            )
        )
    data = [c.file(r, f"data: {r.get('name', Path(r['path']).name)}") for r in manifest["data"]]
    plugins = [
        c.file(r, f"plug-in of case {r['case']} ({r['framework']}): its training program")
        for r in manifest.get("plugins", [])
    ]
    for entity, record in zip(data, manifest["data"], strict=True):
        if record["root"] == "package":
            entity["isPartOf"] = c.app(record["package"], record["package_version"])
    return configs, data, plugins


def _add_measuring_runs(c: _Crate, manifest: Mapping, inputs: list) -> tuple[dict, dict]:
    """The per-job tables, then the measuring runs that made them from ``inputs`` (one
    ``CreateAction`` each, on its machine, with its probe records), then the probe
    records of no run. Returns ``(points, runs_by_case)``: the per-job tables' entities
    by path, and each case's per-job table paths."""
    points = {r["path"]: c.file(r, f"per-job timings {r['path']}") for r in manifest["points"]}
    probes = {r["path"]: r for r in manifest["probes"]}
    runs_by_case: dict[str, list[str]] = {}
    for run in manifest["runs"]:
        framework_app = c.app(str(run.get("framework")), run.get("framework_version"))
        requirements = [c.app("python", run.get("python_version"))]
        if run.get("cuda_version") not in (None, "nan"):
            requirements.append(c.app("cuda", run.get("cuda_version")))
        framework_app["softwareRequirements"] = requirements
        action = c.crate.add_action(
            framework_app,
            identifier=f"#run-{run['run_id']}",
            object=inputs,
            result=[points[p] for p in run.get("points", []) if p in points],
            properties={
                "@type": "CreateAction",
                "name": (
                    f"measure {run.get('case')} in {run.get('framework')} on "
                    f"{run.get('device')} (run {run['run_id']})"
                ),
                "description": (
                    f"{run.get('rows')} point(s), statuses {json.dumps(run.get('statuses'))}; "
                    f"threads {run.get('threads')}; git {run.get('git_commit')}"
                ),
                **({"startTime": run["first_utc"]} if run.get("first_utc") else {}),
                **({"endTime": run["last_utc"]} if run.get("last_utc") else {}),
            },
        )
        action["location"] = c.machine(run)
        c.crate.root_dataset.append_to("mentions", action)
        for point in run.get("points", []):
            probe = probes.get(re.sub(r"\.csv$", ".probe.json", point))
            if probe is not None:
                c.file(probe, f"probe record of run {run['run_id']}", about=action)
        case = run.get("case")
        if isinstance(case, str):
            runs_by_case.setdefault(case, []).extend(run.get("points", []))
    known = {e.id for e in c.crate.get_entities()}
    for path, record in probes.items():  # probes of no run: described all the same
        if crate_path(record, c.results_dir) not in known:
            c.file(record, f"probe record {path}")
    return points, runs_by_case


def _add_outputs(c: _Crate, manifest: Mapping, points: dict, runs_by_case: dict) -> list:
    """The run's tables, figures and report, each linked to what it derives from (a
    figure: the tables it records as its sources and its case's per-job tables).
    Returns their entities."""
    tables = manifest["tables"]
    timings = c.file(
        tables["timings"],
        "timings.csv: one row per measured point",
        isBasedOn=list(points.values()),
    )
    crossover = c.file(
        tables["crossover"], "crossover.csv: crossover size and N* per curve", isBasedOn=timings
    )
    outputs = [timings, crossover]
    # The tables beside timings.csv (format 3), collected with it from the same records.
    for table in STUDY_TABLES[1:]:
        if table in tables:
            outputs.append(
                c.file(
                    tables[table],
                    f"{table}.csv: beside timings.csv, keyed by the point",
                    isBasedOn=list(points.values()),
                )
            )
    if "wall" in tables:
        outputs.append(
            c.file(tables["wall"], "wall.json: measured share of wall time", isBasedOn=timings)
        )
    derived = {
        Path(tables[r]["path"]).name: e for r, e in (("timings", timings), ("crossover", crossover))
    }
    # Reference runs' tables the report drew beside the study (cross-machine figures).
    derived.update(
        {
            name: c.file(record, f"reference run table {name}")
            for name, record in manifest.get("reference_tables", {}).items()
        }
    )
    # The longest case name a figure's name starts with (digits-cnn-... is digits-cnn's,
    # not a case called digits).
    by_length = sorted(case_registry.names(), key=len, reverse=True)
    figures = []
    for record in manifest["figures"]:
        name = Path(record["path"]).name
        case = next((n for n in by_length if name.startswith(f"{n}-")), None)
        # The tables the figure records as its sources (both study tables when it
        # records none, as figures drawn before sources were recorded).
        sources = record.get("sources") or dict.fromkeys(list(derived)[:2])
        based_on = [entity for table, entity in derived.items() if table in sources]
        based_on += [points[p] for p in sorted(set(runs_by_case.get(case, []))) if p in points]
        figures.append(c.file(record, f"figure {name}", isBasedOn=based_on))
    report = manifest["report"]
    outputs += figures
    if "notebook" in report:  # a run measured without its report has none
        notebook = c.file(
            report["notebook"], "executed report notebook", isBasedOn=[timings, crossover]
        )
        outputs.append(notebook)
        if "html" in report:
            outputs.append(c.file(report["html"], "report (HTML)", isBasedOn=[notebook, *figures]))
    return outputs


def write_crate(
    manifest: Mapping,
    workdir: str | Path,
    out: str | Path,
    repo: str | Path = REPO_ROOT,
    manifest_path: str | Path | None = None,
) -> Path:
    """Build the crate (:func:`build_crate`) and write its metadata file at ``out``
    (``results/<study>/ro-crate-metadata.json``, or a frozen copy's) atomically, after
    copying the workflow's definition beside it (:func:`copy_workflow`); the crate
    describes the folder of ``out``. Returns ``out``. Raises ValueError
    when the recorded workflow files cannot be found (see :func:`copy_workflow`)."""
    crate_dir = Path(out).parent
    copy_workflow(manifest, crate_dir, repo)
    crate = build_crate(manifest, workdir, repo, manifest_path=manifest_path, crate_dir=crate_dir)
    return write_json(crate.metadata.generate(), out)
