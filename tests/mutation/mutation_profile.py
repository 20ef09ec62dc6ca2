"""pytest plugin for the mutation run (`-p mutation_profile`): registers the `xla-mutation`
Hypothesis profile before Hypothesis reads `--hypothesis-profile`.

- 10 examples instead of `xla-emulated`'s 100: each mutant runs the suite again, and the run
  must stay within its time budget.
- Derandomized: a mutant is caught or survives the same way on every run (the score is
  reproducible).
- No shrinking: a mutant only needs one failing example, and shrinking one that fails in a
  training property would rerun it (with XLA compiles) dozens of times.
- No example database: the run's copies are thrown away.
"""

from hypothesis import Phase, settings

settings.register_profile(
    "xla-mutation",
    deadline=None,
    max_examples=10,
    derandomize=True,
    database=None,
    phases=(Phase.explicit, Phase.reuse, Phase.generate),
    print_blob=True,
)
