"""Templates of `zmr new` (package data; `zmr.ops.new` fills them in with `string.Template`)."""
