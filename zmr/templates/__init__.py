"""Templates of `zmr new` (package data; `zmr.scaffold` fills them in with `string.Template`)."""
