"""pytest plugin for the pod's property run (`-p few_examples`): the `xla-few` Hypothesis profile,
8 examples a property, random as Hypothesis' default is (not derandomized, the directory
database on): on a pod the plugin itself must make every machine draw the same examples."""

from hypothesis import settings

settings.register_profile("xla-few", deadline=None, max_examples=8, print_blob=True)
