"""``zmr smoke``: run each model's declared smoke tests in clean trees of its release branches.

- `zmr.smoke.runner`: selection, trees, the local executor, the summary and
  JUnit report (the pipeline is its docstring; docs/reference.md §9);
- `zmr.smoke.ray_executor`: the same jobs as Ray tasks (``--executor ray``);

The patch-set core never imports this package; it imports the core's public
modules (project, manifest, build, cache, git, errors, files, and
`zmr.infra.procgroup`, which runs each test command in its own process group as
it runs `zmr update --test`'s checks).
"""
