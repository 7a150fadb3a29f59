"""`exactly demo` (`make demo`): an application of the Spark connector, not part of it.

- `exactly.demo.pipeline`: the Spark driver process and its two streaming queries (format
  `exactly`, through `exactly.spark`'s public names only);
- `exactly.demo.app`: the rest of the demo: the embedded broker, the order events it feeds, the
  driver kills, and the check of every output against the input.

Nothing is imported here: `python -m exactly.demo.pipeline` starts a Spark driver, and loading
the package first must not load the demo's other modules into that process.
"""
