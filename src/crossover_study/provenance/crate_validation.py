"""Validate RO-Crates with ``roc-validator``, offline.

Runs in the validator's own environment (``.venv-crate``, ``make crate-validator``;
its pins clash with ``requirements.lock``), so it imports nothing from this package and
nothing outside the standard library at module level::

    .venv-crate/bin/python src/crossover_study/provenance/crate_validation.py \\
        --context .venv/lib/python3.11/site-packages/rocrate/data/ro-crate.jsonld \\
        results/smoke results/reference/*/

Our crates are RO-Crate 1.3 with Workflow Run Crate 0.6 (see
:mod:`crossover_study.provenance.crate`). roc-validator 0.13.0 knows the RO-Crate 1.3 profile but
Workflow Run Crate, Process Run Crate and Workflow RO-Crate only in the versions built
on RO-Crate 1.1 (0.5, 0.5 and 1.0). So each crate is checked at the REQUIRED level
against (:data:`CHECKS`): RO-Crate 1.3 with everything it inherits, then the three
workflow profiles' own shapes without their RO-Crate 1.1 base. One shape is skipped,
with its reason: Workflow RO-Crate 1.0's type check of the main workflow expects
``https://bioschemas.org/ComputationalWorkflow``, which the RO-Crate 1.3 context maps
to ``https://bioschemas.org/terms/ComputationalWorkflow`` (the changelog of Workflow
Run Crate 0.6: not backward compatible with RO-Crate 1.1 / Workflow RO-Crate 1.0).

Offline: the validator resolves the crate's JSON-LD context
(``https://w3id.org/ro/crate/1.3/context``) over HTTP through its requests-cache. The
cache is filled first with the copy of that context the ``rocrate`` package ships
(``--context``), served by a local transport adapter, and the validator then runs with
``offline=True``: any other URL it asked for would be a cache miss and fail the check.

Exit status 0 when every crate passes every check, 1 otherwise.
"""

from __future__ import annotations

import argparse
import io
import tempfile
from pathlib import Path

#: The context our crates use (RO-Crate 1.3) and is preloaded from --context.
CONTEXT_URL = "https://w3id.org/ro/crate/1.3/context"
#: (profile, inherit its base profiles, checks skipped) per validation pass.
CHECKS: tuple[tuple[str, bool, tuple[str, ...]], ...] = (
    ("ro-crate-1.3", True, ()),
    ("workflow-run-crate-0.5", False, ()),
    ("process-run-crate-0.5", False, ()),
    # 2.1: main workflow types under the RO-Crate 1.1 IRIs (see the module docstring).
    ("workflow-ro-crate-1.0", False, ("workflow-ro-crate-1.0_2.1",)),
)


def preload_context(cache: Path, context_file: Path) -> None:
    """Store ``context_file`` in the validator's HTTP cache (an sqlite requests-cache
    at ``cache``) as the response to ``GET`` :data:`CONTEXT_URL`. Raises
    RuntimeError when the cached response is not the file."""
    import urllib3
    from requests.adapters import HTTPAdapter
    from requests_cache import CachedSession

    body = context_file.read_bytes()

    class _Local(HTTPAdapter):
        """Answers every request with the context file (never the network)."""

        def send(self, request, **kwargs):
            raw = urllib3.HTTPResponse(
                body=io.BytesIO(body),
                headers={"Content-Type": "application/ld+json"},
                status=200,
                preload_content=False,
                request_url=request.url,
            )
            return self.build_response(request, raw)

    # The same session settings as rocrate_validator.utils.http.HttpRequester.
    session = CachedSession(
        cache_name=str(cache),
        backend="sqlite",
        expire_after=-1,
        allowable_methods=("GET",),
        allowable_codes=(200, 302, 404),
    )
    session.mount(CONTEXT_URL, _Local())
    response = session.get(CONTEXT_URL)
    if response.status_code != 200 or response.content != body:
        raise RuntimeError(f"could not preload {CONTEXT_URL} from {context_file}")
    session.close()


def validate(crate: Path, cache: Path) -> list[str]:
    """Every issue roc-validator reports for ``crate`` (a folder holding
    ``ro-crate-metadata.json``) under :data:`CHECKS`, as ``profile: check: message
    (entity)`` lines; empty when it passes."""
    from rocrate_validator import services
    from rocrate_validator.models import ValidationSettings

    issues = []
    for profile, inherit, skipped in CHECKS:
        settings = ValidationSettings(
            rocrate_uri=str(crate),
            profile_identifier=profile,
            requirement_severity="REQUIRED",
            enable_profile_inheritance=inherit,
            skip_checks=list(skipped),
            offline=True,
            cache_path=cache,
        )
        result = services.validate(settings)
        for issue in result.get_issues():
            check = issue.check.identifier if issue.check else "?"
            entity = getattr(issue, "violatingEntity", None)
            issues.append(
                f"{profile}: {check}: {issue.message}" + (f" ({entity})" if entity else "")
            )
        if not result.passed() and not issues:
            issues.append(f"{profile}: not passed, with no issue reported")
    return issues


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    """Command line: validate the given crates; print each one's issues."""
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    parser.add_argument("--context", required=True, type=Path, help="rocrate's ro-crate.jsonld")
    parser.add_argument("crates", nargs="+", type=Path, help="folders with ro-crate-metadata.json")
    args = parser.parse_args(argv)
    failed = False
    with tempfile.TemporaryDirectory(prefix="crate-validation-") as tmp:
        cache = Path(tmp) / "http_cache"
        preload_context(cache, args.context)
        for crate in args.crates:
            issues = validate(crate, cache)
            print(f"{crate}: {'OK' if not issues else f'{len(issues)} issue(s)'}")
            for line in issues:
                print(f"  {line}")
            failed |= bool(issues)
    return 1 if failed else 0
