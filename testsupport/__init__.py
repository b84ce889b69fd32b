"""What the tests, the soak and the benchmarks share, kept out of the libraries' ``src``.

* :mod:`testsupport.gcs`: the local GCS emulators (``gcp-storage-emulator``, ``fake-gcs-server``)
  and fresh store roots;
* :mod:`testsupport.latency`: a loopback proxy that delays and counts requests;
* :mod:`testsupport.ray_cluster`: Ray heads and multi-node clusters on 127.0.0.1 (pytest fixtures);
* :mod:`testsupport.fray_jobs`, :mod:`testsupport.iris_jobs`: small jobs workers import by name.
* :mod:`testsupport.cpu_devices`: the environment of a child process that runs JAX on N CPU devices;
* :mod:`testsupport.shared`: folders built once per test session and shared by every xdist worker;
* :mod:`testsupport.e2e`: the real ``marin`` CLI and ``make`` as subprocesses, the small cache-test
  experiment, and the nano and ``make experiments`` stores the end-to-end tests share;
* :mod:`testsupport.lm_graph`: a tiny language-model graph (corpus, BPE, shards, tiny Llamas);
* :mod:`testsupport.hub_cache`: Hugging Face hub-cache folders built from generated data;
* :mod:`testsupport.levanter_data`, :mod:`testsupport.zephyr_data`: small datasets, configs and
  functions the levanter and zephyr tests (and their worker processes) share;
* :mod:`testsupport.sweep_trials`: cheap stand-ins for training runs (the sweep and scaling tests);
* ``testsupport/toplevel/steps_for_tests.py``: the step functions most marin engine tests build,
  imported by that top-level name (marin's ``conftest.py`` puts the folder on ``sys.path``): the
  pinned step hashes hold ``steps_for_tests:<name>``;
* :mod:`testsupport.leases`, :mod:`testsupport.browser`, :mod:`testsupport.net`: other runners'
  leases, a report page in Chromium, free ports.

An installed package of the workspace root (``pyproject.toml``'s wheel ``packages``), so fresh
worker processes (local processes, Ray workers) import the jobs by name. No library imports it
(import-linter forbids it).
"""
