"""What the tests, the soak and the benchmarks share, kept out of the libraries' ``src``.

* :mod:`testsupport.gcs`: the local GCS emulators (``gcp-storage-emulator``, ``fake-gcs-server``)
  and fresh store roots;
* :mod:`testsupport.latency`: a loopback proxy that delays and counts requests;
* :mod:`testsupport.ray_cluster`: Ray heads and multi-node clusters on 127.0.0.1 (pytest fixtures);
* :mod:`testsupport.fray_jobs`, :mod:`testsupport.iris_jobs`: small jobs workers import by name.

An installed package of the workspace root (``pyproject.toml``'s wheel ``packages``), so fresh
worker processes (local processes, Ray workers) import the jobs by name. No library imports it
(import-linter forbids it).
"""
