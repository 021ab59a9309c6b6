"""Stage 7, generate: lowered packets built into frames and streamed into capture files.

Modules: :mod:`~tokenpcap.generate.select` (what a run keeps), :mod:`~tokenpcap.generate.size`
(the size of a capture before it is written), :mod:`~tokenpcap.generate.output` (files, comments,
writer processes), :mod:`~tokenpcap.generate.options` (what a run is asked for and reports),
:mod:`~tokenpcap.generate.route` (the files of a split and what each chunk sends to them),
:mod:`~tokenpcap.generate.run` (:func:`generate`), :mod:`~tokenpcap.generate.fabricfiles` (a
queued-fabric run's side files beside the captures; their column checks in
:mod:`~tokenpcap.generate.fabriccolumns`).
"""
