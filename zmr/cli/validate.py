"""`zmr validate`: check manifests, cases and series; every problem at once.

The work is `zmr.ops.validate`.
"""

from typing import Annotated

import typer

from zmr.cli.options import Json, Models, Untrusted, find_project
from zmr.cli.render import print_report, warn
from zmr.infra.wording import counted


def validate(
    models: Models = None,
    json_out: Json = False,
    untrusted: Untrusted = False,
    require_upstream_status: Annotated[
        bool, typer.Option("--require-upstream-status", help="Also require every patch to declare its upstream status (Upstream-Status:, Forwarded:).")
    ] = False,
) -> None:
    """Check manifests and series: schema, files, ordering. Exit 2 on any problem."""
    import zmr.ops.validate
    from zmr.infra.errors import CaseError, ZmrError

    report = zmr.ops.validate.validate(find_project(untrusted), models, require_upstream_status=require_upstream_status)
    for text in report.warnings:
        warn(text)
    if json_out:
        # The problems are the report (stdout); the exit status still says there are some.
        print_report(report)
        if report.failed():
            raise ZmrError(f"{report.reason()}, listed in the JSON report")
        return
    if report.errors:
        if isinstance(report.errors[0], CaseError):  # the manifests and cases could not be read: the series were not
            raise report.errors[0]
        texts = [str(err) for err in report.errors]
        raise ZmrError(texts[0].splitlines()[0], details=[line for text in texts for line in text.splitlines()][1:])
    models_n, cases_n = len(report.models), len(report.cases)
    print(f"ok: {counted(models_n, 'manifest')}, {counted(cases_n, 'case')}, {counted(report.patches, 'patch')}")
