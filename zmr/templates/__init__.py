"""Templates of `zmr new` (package data; `zmr.new` fills them in with `string.Template`)."""
