"""AISBench conventions, as the real AISBench follows them (docs/benchmarks.md).

- `command`: what a wrapped `ais_bench ...` command line says (models, config dir, work dir);
- `configs`: where its model configs are and which servers they name;
- `evaluate`: a config evaluated as AISBench evaluates it, in a process of its own;
- `files`: the names and folders of result files, never overwriting AISBench's own.
"""
