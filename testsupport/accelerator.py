"""A simulated exclusive accelerator: its runtime's lock file, held the way libtpu holds its own."""

from __future__ import annotations

import subprocess
import sys

__all__ = ["LIBTPU_HELD", "hold_lock"]

LIBTPU_HELD = ("Unable to initialize backend 'tpu': ABORTED: Internal error when accessing libtpu multi-process "
               "lockfile. Run \"$ sudo rm /tmp/libtpu_lockfile\". (set JAX_PLATFORMS='' to automatically choose "
               "an available backend)")
"""What libtpu raises in a second process that opens the TPU (read off a real TPU v5e host)."""


def hold_lock(lock: str, seconds: float) -> subprocess.Popen:
    """A process of its own holding ``lock`` as libtpu does (a POSIX write lock over the whole
    file) for ``seconds``, or until killed; returns once it holds it. Its last line of output is
    the time it let go."""
    code = ("import fcntl, os, sys, time; fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600); "
            "fcntl.lockf(fd, fcntl.LOCK_EX); print('held', flush=True); time.sleep(float(sys.argv[2])); "
            "t = time.time(); os.close(fd); print(t, flush=True)")
    proc = subprocess.Popen([sys.executable, "-c", code, lock, str(seconds)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc
