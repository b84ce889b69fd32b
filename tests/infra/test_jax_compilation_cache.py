"""The test session's JAX compilation cache (the root ``conftest.py``): a program one process of the
session compiled is read, not compiled again, by a process the session starts (an xdist worker's
step subprocess); the cache is the session's own folder, locked while an entry is read or written."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from testsupport.shared import session_root

# A program of shapes no other test compiles, so the entry can only come from this test's process.
_PROBE = '''\
import jax, jax.numpy as jnp

def _suite_cache_probe(w, x):
    return jnp.tanh(x @ w).sum()

jax.jit(_suite_cache_probe).lower(jnp.ones((37, 53)), jnp.ones((3, 37))).compile()
print(jax.config.jax_compilation_cache_dir, jax.config.jax_compilation_cache_max_size)
'''


def test_a_subprocess_reads_what_the_test_process_compiled(tmp_path_factory: pytest.TempPathFactory) -> None:
    exec(compile(_PROBE, "probe", "exec"), {})  # compiled (and cached) by this process
    cache = Path(os.environ["JAX_COMPILATION_CACHE_DIR"])
    assert cache.is_relative_to(session_root(tmp_path_factory)) or os.environ.get("MARIN_TEST_JAX_CACHE"), cache

    env = {**os.environ, "JAX_DEBUG_LOG_MODULES": "jax._src.compiler"}
    # (JAX logs the hits at DEBUG, to a handler the subprocess must set up.)
    ran = subprocess.run([sys.executable, "-c", "import logging; logging.basicConfig()\n" + _PROBE],
                         capture_output=True, text=True, env=env, timeout=300)
    assert ran.returncode == 0, ran.stderr[-3000:]

    log = ran.stderr
    assert "Persistent compilation cache hit for 'jit__suite_cache_probe'" in log, log[-3000:]
    assert "CACHE MISS for 'jit__suite_cache_probe'" not in log, log[-3000:]
    folder, max_size = ran.stdout.split()
    assert Path(folder) == cache and int(max_size) > 0, ran.stdout
    # The lock JAX takes around each read and write of an entry once the cache has a size limit.
    assert (cache / ".lockfile").exists(), sorted(p.name for p in cache.iterdir())[:20]
