"""Data processing: Marin's ``marin.processing`` names, and the data-curation steps.

Subpackages (imported on use; nothing is loaded here): ``attributes`` (document and sidecar
formats), ``text``, ``html`` (HTML to text), ``dedup`` (exact and near-duplicate), ``quality``
(fastText classifier, heuristic rules), ``decontaminate``, ``consolidate``, ``webcorpus`` (a
generated test corpus) and ``tokenize``.
"""
