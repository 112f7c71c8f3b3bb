"""``zmr import``: existing release branches → the manifest and series that rebuild them.

- `zmr.importing.importer`: the command (docs/reference.md §7.10);
- `zmr.importing.findbase`: ``--find-base``, the closest upstream commit to a
  snapshot that names none;
- `zmr.importing.upstream_words`: upstream commit ids as hand-made snapshot
  messages spell them.

The patch-set core never imports this package.
"""
