"""A Workflow Run RO-Crate of one study run, written with the ``rocrate`` library.

``results/<study>/ro-crate-metadata.json`` describes the run of the workflow in the
terms of the Workflow Run Crate profile (https://w3id.org/ro/wfrun/workflow/0.6) and
RO-Crate 1.3. The crate's root is the study's results folder; files elsewhere in the
working directory (the report and its figures) are referenced by relative paths
(``../../reports/<study>/...``), code outside it by ``file://`` URIs. Everything is
read from the study's manifest (:mod:`crossover_study.manifest`):

- the main entity is the ``Snakefile`` (``ComputationalWorkflow``, version = git
  commit) and one ``CreateAction`` is the workflow run: config files in, tables, report,
  figures and manifest out;
- one ``CreateAction`` per measuring run (``run_id``): its instrument is the framework
  (``SoftwareApplication`` with its version, and Python and CUDA as software
  requirements), its ``location`` the machine (host, CPU model, device name), its
  result the per-job table(s), and probe records are ``about`` it;
- each figure ``isBasedOn`` the tables it was drawn from (its recorded sources: the
  study's tables and, for the cross-machine figures, the reference runs' tables
  recorded under ``reference_tables``) and the per-job tables of the runs of its case; ``timings.csv`` is based on the per-job tables, ``crossover.csv``
  on ``timings.csv``. Every file carries ``contentSize`` and ``identifier``
  ``sha256:<hex>``.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path

from .manifest import write_json
from .provenance import REPO_ROOT
from .spec import CASES

CRATE_NAME = "ro-crate-metadata.json"
PROFILES: tuple[tuple[str, str, str], ...] = (
    ("https://w3id.org/ro/wfrun/process/0.6", "Process Run Crate", "0.6"),
    ("https://w3id.org/ro/wfrun/workflow/0.6", "Workflow Run Crate", "0.6"),
)
_FORMATS = {
    ".csv": "text/csv",
    ".json": "application/json",
    ".png": "image/png",
    ".svg": "image/svg+xml",
    ".pdf": "application/pdf",
    ".html": "text/html",
    ".ipynb": "application/x-ipynb+json",
    ".yaml": "application/yaml",
}


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9.]+", "-", str(text)).strip("-").lower() or "unknown"


def _crate_id(record: Mapping, workdir: Path, results_dir: Path, repo: Path) -> str:
    """Id of a manifest file record, relative to the crate root (the results folder)
    when it lies in the working directory, else a file:// URI."""
    root = {"workdir": workdir, "repo": repo}.get(record["root"])
    path = (root / record["path"]) if root is not None else Path(record["path"])
    path = path.resolve()
    if path.is_relative_to(workdir.resolve()):
        return Path(os.path.relpath(path, results_dir.resolve())).as_posix()
    return path.as_uri()


def build_crate(
    manifest: Mapping,
    workdir: str | Path,
    repo: str | Path = REPO_ROOT,
    manifest_path: str | Path | None = None,
):
    """The Workflow Run Crate of the run described by ``manifest`` (a ``rocrate``
    ``ROCrate``; not written). ``workdir`` is the working directory the manifest's paths
    are relative to; ``manifest_path`` the manifest file itself (added as a file about
    the workflow run when given). Raises KeyError for a manifest without the study
    layout."""
    from rocrate.model.contextentity import ContextEntity
    from rocrate.rocrate import ROCrate

    workdir = Path(workdir).resolve()
    repo = Path(repo).resolve()
    results_dir = workdir / manifest["results_dir"]
    crate = ROCrate()

    def _location(record: Mapping) -> dict:
        """add_file/add_workflow arguments: a path in the crate, or a URI as source."""
        ident = _crate_id(record, workdir, results_dir, repo)
        return {"source": ident} if ident.startswith("file:") else {"dest_path": ident}

    def add_file(record: Mapping, name: str, **extra):
        suffix = Path(record["path"]).suffix
        props = {
            "name": name,
            "contentSize": str(record["bytes"]),
            "identifier": f"sha256:{record['sha256']}",
            **({"encodingFormat": _FORMATS[suffix]} if suffix in _FORMATS else {}),
        }
        entity = crate.add_file(**_location(record), properties=props)
        for key, value in extra.items():  # links: entities become {"@id": ...}
            entity[key] = value
        return entity

    study = manifest["study"]
    crate.root_dataset["name"] = f"crossover-study: run of study {study}"
    crate.root_dataset["description"] = (
        f"Results of the crossover study {study!r}: where the accelerator overtakes the "
        "CPU for small networks, with the runs, machines and software they came from."
    )
    if manifest.get("runner"):  # measured without Snakemake (the GPU reference run)
        crate.root_dataset["description"] += (
            f" Measured by {manifest['runner']['name']}: the measuring jobs the workflow's "
            "measure rule runs, started one by one without Snakemake; the report is not "
            "part of this run."
        )
    crate.root_dataset["datePublished"] = manifest["created_utc"]
    crate.root_dataset["license"] = crate.add(
        ContextEntity(
            crate,
            "https://spdx.org/licenses/MIT",
            properties={"@type": "CreativeWork", "name": "MIT License"},
        )
    )

    # The workflow (prospective) and the engine it runs on.
    snakefile = next(r for r in manifest["code"] if r["path"] == "Snakefile")
    workflow = crate.add_workflow(
        **_location(snakefile),
        main=True,
        lang="snakemake",
        lang_version=manifest.get("snakemake_version"),
        properties={
            "name": "crossover-study",
            "version": manifest["git"]["commit"],
            "identifier": f"sha256:{snakefile['sha256']}",
            "runtimePlatform": f"Snakemake {manifest.get('snakemake_version')}",
            "description": (
                "git commit "
                f"{manifest['git']['commit']}{' (dirty)' if manifest['git']['dirty'] else ''}"
            ),
        },
    )
    for profile_id, name, version in PROFILES:
        profile = crate.add(
            ContextEntity(
                crate,
                profile_id,
                properties={"@type": ["CreativeWork", "Profile"], "name": name, "version": version},
            )
        )
        crate.root_dataset.append_to("conformsTo", profile)

    configs = [
        add_file(r, f"study config {Path(r['path']).name}") for r in manifest["config"]["files"]
    ]
    data = [add_file(r, f"data: {r.get('name', Path(r['path']).name)}") for r in manifest["data"]]

    # Per-job tables and probes, then the measuring runs that made them.
    points = {r["path"]: add_file(r, f"per-job timings {r['path']}") for r in manifest["points"]}
    probes = {r["path"]: r for r in manifest["probes"]}
    software: dict[tuple[str, str], object] = {}
    machines: dict[tuple[str, str, str], object] = {}

    def app(name: str, version: str | None):
        key = (name, str(version))
        if key not in software:
            software[key] = crate.add(
                ContextEntity(
                    crate,
                    f"#software-{_slug(name)}-{_slug(version)}",
                    properties={
                        "@type": "SoftwareApplication",
                        "name": name,
                        "softwareVersion": str(version),
                    },
                )
            )
        return software[key]

    def machine(run: Mapping):
        key = (str(run.get("host")), str(run.get("cpu_model")), str(run.get("device_name")))
        if key not in machines:
            host, cpu, device = key
            details = {
                "host": host,
                "node": run.get("node"),
                "partition": run.get("partition"),
                "cpu_model": cpu,
                "device_name": device,
            }
            values = []
            for name, value in details.items():
                if value not in (None, "None", "nan", ""):
                    values.append(
                        crate.add(
                            ContextEntity(
                                crate,
                                f"#machine-{_slug(host)}-{_slug(device)}-{name}",
                                properties={
                                    "@type": "PropertyValue",
                                    "name": name,
                                    "value": str(value),
                                },
                            )
                        )
                    )
            machines[key] = crate.add(
                ContextEntity(
                    crate,
                    f"#machine-{_slug(host)}-{_slug(device)}",
                    properties={
                        "@type": "Place",
                        "name": f"{host}: {device}",
                        "description": f"host {host}, CPU {cpu}, device {device}",
                        "additionalProperty": values,
                    },
                )
            )
        return machines[key]

    runs_by_case: dict[str, list[str]] = {}
    for run in manifest["runs"]:
        framework_app = app(str(run.get("framework")), run.get("framework_version"))
        requirements = [app("python", run.get("python_version"))]
        if run.get("cuda_version") not in (None, "nan"):
            requirements.append(app("cuda", run.get("cuda_version")))
        framework_app["softwareRequirements"] = requirements
        results = [points[p] for p in run.get("points", []) if p in points]
        action = crate.add_action(
            framework_app,
            identifier=f"#run-{run['run_id']}",
            object=configs,
            result=results,
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
        action["location"] = machine(run)
        crate.root_dataset.append_to("mentions", action)
        for point in run.get("points", []):
            probe = probes.get(re.sub(r"\.csv$", ".probe.json", point))
            if probe is not None:
                add_file(probe, f"probe record of run {run['run_id']}", about=action)
        case = run.get("case")
        if isinstance(case, str):
            runs_by_case.setdefault(case, []).extend(run.get("points", []))
    for path, record in probes.items():
        if path not in {e.id for e in crate.get_entities()}:
            add_file(record, f"probe record {path}")

    # Tables, report and figures, each linked to what it derives from.
    tables = manifest["tables"]
    timings = add_file(
        tables["timings"],
        "timings.csv: one row per measured point",
        isBasedOn=list(points.values()),
    )
    crossover = add_file(
        tables["crossover"], "crossover.csv: crossover size and N* per curve", isBasedOn=timings
    )
    outputs = [timings, crossover]
    if "wall" in tables:
        outputs.append(
            add_file(tables["wall"], "wall.json: measured share of wall time", isBasedOn=timings)
        )
    derived = {
        Path(tables[r]["path"]).name: e for r, e in (("timings", timings), ("crossover", crossover))
    }
    # Reference runs' tables the report drew beside the study (cross-machine figures).
    derived.update(
        {
            name: add_file(record, f"reference run table {name}")
            for name, record in manifest.get("reference_tables", {}).items()
        }
    )
    figures = []
    for record in manifest["figures"]:
        name = Path(record["path"]).name
        case = next((c for c in CASES if name.startswith(f"{c}-")), None)
        # The tables the figure records as its sources (both study tables when it
        # records none, as figures drawn before sources were recorded).
        sources = record.get("sources") or dict.fromkeys(list(derived)[:2])
        based_on = [entity for table, entity in derived.items() if table in sources]
        based_on += [points[p] for p in sorted(set(runs_by_case.get(case, []))) if p in points]
        figures.append(add_file(record, f"figure {name}", isBasedOn=based_on))
    report = manifest["report"]
    outputs += figures
    if "notebook" in report:  # a run measured without its report has none
        notebook = add_file(
            report["notebook"], "executed report notebook", isBasedOn=[timings, crossover]
        )
        outputs.append(notebook)
        if "html" in report:
            outputs.append(
                add_file(report["html"], "report (HTML)", isBasedOn=[notebook, *figures])
            )

    run = crate.add_action(
        workflow,
        identifier=f"#workflow-run-{_slug(study)}",
        object=[*configs, *data],
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
    crate.root_dataset.append_to("mentions", run)
    if manifest_path is not None:
        from .manifest import file_record

        add_file(
            file_record(manifest_path, workdir, repo),
            "manifest.json: sha256 of every input and output, package versions, git state",
            about=run,
        )
    return crate


def write_crate(
    manifest: Mapping,
    workdir: str | Path,
    out: str | Path,
    repo: str | Path = REPO_ROOT,
    manifest_path: str | Path | None = None,
) -> Path:
    """Build the crate (:func:`build_crate`) and write its metadata file at ``out``
    (``results/<study>/ro-crate-metadata.json``) atomically. Returns ``out``."""
    crate = build_crate(manifest, workdir, repo, manifest_path=manifest_path)
    return write_json(crate.metadata.generate(), out)
