"""`zmr ci-matrix`: the GitHub Actions matrix of smoke tests, one entry per test.

The work is `zmr.ops.publish.ci_matrix`.
"""

import sys

from zmr.cli.options import Json, Models, Untrusted, find_project


def ci_matrix(models: Models = None, untrusted: Untrusted = False, json_out: Json = False) -> None:
    """Print the CI job matrix as one line of JSON: {"include": [one job per model × component]}.

    Its output is JSON with or without --json: the flag is accepted, as by every reporting command.
    """
    import json

    import zmr.ops.publish

    project = find_project(untrusted)
    matrix = zmr.ops.publish.ci_matrix(project.manifests(models))
    sys.stdout.write(json.dumps(matrix.to_json(), separators=(",", ":"), sort_keys=True) + "\n")
