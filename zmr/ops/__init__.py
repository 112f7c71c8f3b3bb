"""The operations layer: what each command of the patch-set core does, as library calls that return reports.

Replay and landing, build, verify, publish, the checkout package, export, rebase,
update, diff, status, bisect, init, new, docs and validate. It imports zmr.model
and zmr.infra (tests/test_architecture.py, ``LAYERS``); the CLI renders what it returns.
"""
