"""The model zoo: a controlled family of small decoder-only models that differ only in their position scheme.

Every member of a family shares the task, the data and its order, the seed (so the
initial weights), the width, the depth, the tokenizer, the optimizer
and the architecture class (Mistral); only the RoPE base and the sliding window
change. Each trained model is an ordinary Hugging Face folder that
:func:`poslens.load_model` reads.

- :mod:`poslens.zoo.data` — the natural-text task (``stdlib``): the training text from the Python install itself (the
  standard library's source and ``pydoc_data.topics``), a held-out split by file hash, byte tokens, batches;
- :mod:`poslens.zoo.backcopy` — the synthetic task (``bigram-backcopy``): a seeded bigram chain with trigger tokens
  after which the token before the trigger is copied, on which small models can form BOS sinks within CPU minutes;
- :mod:`poslens.zoo.family` — the members (standard, large base (trained), sliding) and their configs;
- :mod:`poslens.zoo.evaluate` — held-out loss and sink counts of a model under training;
- :mod:`poslens.zoo.train` — :class:`~poslens.zoo.settings.ZooSettings` (in :mod:`poslens.zoo.settings`) and :func:`~poslens.zoo.train.train_family`,
  which trains every member and seed in lockstep and writes the folders, logs and a summary table;
- :mod:`poslens.zoo.store` — a finished family kept in float16 with the sha256 of every file (docs/zoo_family).

A trained family is measured by :mod:`poslens.study.zoo_measure` (``poslens zoo-measure``), in the study layer:
every run with poslens's parts, seeds as replicates, and C4 decided inside the family.
"""
