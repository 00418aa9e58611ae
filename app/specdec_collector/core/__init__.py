"""The pure core: counter schemas, exposition parsing, arithmetic, results, renderings; no I/O."""
