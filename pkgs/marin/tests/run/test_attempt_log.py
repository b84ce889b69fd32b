"""An attempt's log: pulled from a worker elsewhere without repeats, masked, uploaded beside a remote output."""

from __future__ import annotations

from marin.execution.run.attempt_log import AttemptLog
from marin.execution.run.secrets import SecretMask


class _Handle:
    def __init__(self) -> None:
        self.text = ""

    def logs(self) -> str:
        return self.text


def test_a_pulled_log_takes_each_line_once_and_starts_again_with_a_retry(tmp_path):
    log = AttemptLog(str(tmp_path / "out"), SecretMask(("hunter2",)), pulled=True)
    handle = _Handle()
    handle.text = "one hunter2\n"
    log.pull(handle, final=True)
    handle.text += "two\n"
    log.poll(handle)  # within a second of the last pull: nothing yet
    log.pull(handle, final=True)
    log.next_attempt(handle, "[marin] again\n")
    retried = _Handle()
    retried.text = "three\n"
    log.close(retried)
    assert log.path == log.local
    assert open(log.path).read() == "one ***\ntwo\n[marin] again\nthree\n"


def test_a_remote_outputs_log_is_uploaded_beside_it_when_closed():
    log = AttemptLog("memory://logs/out", SecretMask(), pulled=True)
    assert log.remote is not None and log.local != log.remote
    handle = _Handle()
    handle.text = "hello\n"
    log.close(handle)
    assert log.path == log.remote == log.local

    import fsspec

    with fsspec.open(log.remote, "r") as f:
        assert f.read() == "hello\n"  # type: ignore[union-attr]
