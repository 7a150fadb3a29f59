"""Where Exactly answers differently from Apache Kafka 4.4 on purpose, each with its reason.

A difference the conformance corpus finds is a bug unless it is listed. Each corpus module
lists its own in `DIVERGENCES` (a list of `harness.Divergence`); `DELIBERATE` gathers them. Each entry
names the case, the recorded label and the answer's field (fnmatch globs on the last two), and
the KIP or design choice that makes Exactly differ. An entry that no difference matches any more
fails the corpus, so the list stays true. docs/conformance.md prints the list.
"""

from __future__ import annotations

from tests.helpers.conformance.harness import Difference, Divergence


def _gather() -> list[Divergence]:
    import sys

    from tests.helpers.conformance import corpus  # noqa: F401  (imports every corpus module)

    found: list[Divergence] = []
    for name, module in sorted(sys.modules.items()):
        if name.startswith("tests.helpers.conformance.corpus.") and module is not None:
            found += getattr(module, "DIVERGENCES", [])
    return found


def explain(case: str, label: str, d: Difference) -> Divergence | None:
    for div in DELIBERATE:
        if div.explains(case, label, d):
            return div
    return None


DELIBERATE: list[Divergence] = _gather()
