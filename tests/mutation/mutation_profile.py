"""pytest plugin for the mutation run (`-p mutation_profile`): registers the `xla-mutation`
Hypothesis profile before Hypothesis reads `--hypothesis-profile`.

Fewer examples than `xla-emulated` (each mutant runs the suite again, so the run stays within
its time budget), derandomized so that a mutant is caught or survives the same way on every
run (the score is reproducible), and no example database: the run's copies are thrown away.
"""

from hypothesis import settings

settings.register_profile(
    "xla-mutation",
    deadline=None,
    max_examples=10,
    derandomize=True,
    database=None,
    print_blob=True,
)
