"""The study's parts, one module each: every module's ``DECLARES`` is found by :mod:`poslens.study.part_registry`.

A module here declares one part (the compare module two, made together): its compute function, the settings and
options it takes, what its command prints, its figures, its warnings and the claim inputs it provides
(:class:`~poslens.study.part_registry.Part`). Adding a part is adding a module here; nothing else names it.
:mod:`poslens.study.declarations.sink_split` is the worked example (CONTRIBUTING.md, "How to add a study part").
"""
