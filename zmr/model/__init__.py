"""The model layer: what a zmr project's files mean, read and checked.

Manifests, series, patch files, cases, ``zmr.yaml``, the YAML they are read with
(`zmr.model.yamlnodes`, `zmr.model.yamlrecords`) and the published JSON Schemas of them,
and which components a command acts on. It imports zmr.infra alone (tests/test_architecture.py, ``LAYERS``).
"""
