"""The host's accelerator, found from a file system root and an environment (never by opening it),
stated by a configuration, shared in slots, hidden from the processes not admitted to it."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from iris.accelerator import AcceleratorKind, HostAccelerator, detect_accelerator, parse_accelerator
from iris.accelerator_env import SAVED, accelerator_hidden, granted_env, hiding_env, users_environ
from iris.admission import AdmissionController, MachineCapacity, ResourcesTooLarge
from iris.chip_lock import busy_error, lock_holder
from iris.cluster import ResourceConfig
from iris.simulate import Priority, SimCluster, SimStep, simulate
from testsupport.accelerator import LIBTPU_HELD, hold_lock

# What a real TPU v5e host showed (notes of 2026-12-05): the environment names the whole 2x2
# board, one chip is passed through (one numbered vfio group), and /sys lists all four devices.
V5E_BOARD_ENV = {"TPU_ACCELERATOR_TYPE": "v5litepod-4", "TPU_CHIPS_PER_HOST_BOUNDS": "2,2,1", "TPU_TOPOLOGY": "2x2",
                 "TPU_WORKER_ID": "0", "TPU_SKIP_MDS_QUERY": "true"}


def _root(tmp_path: Path, dev: list[str] = (), pci_vendors: list[str] = (), gpu_model: str | None = None) -> Path:
    root = tmp_path / "root"
    for name in dev:
        (root / "dev" / name).parent.mkdir(parents=True, exist_ok=True)
        (root / "dev" / name).write_text("")
    for i, vendor in enumerate(pci_vendors):
        folder = root / "sys" / "bus" / "pci" / "devices" / f"0000:00:0{i}.0"
        folder.mkdir(parents=True)
        (folder / "vendor").write_text(vendor + "\n")
    if gpu_model is not None:
        info = root / "proc" / "driver" / "nvidia" / "gpus" / "0000:00:04.0"
        info.mkdir(parents=True)
        (info / "information").write_text(f"Model: \t\t {gpu_model}\nIRQ:   34\n")
    root.mkdir(parents=True, exist_ok=True)
    return root


def test_a_one_chip_slice_of_a_v5e_board_is_one_v5e_chip_counted_from_the_device_files(tmp_path):
    root = _root(tmp_path, dev=["vfio/vfio", "vfio/2"], pci_vendors=["0x1ae0"] * 4)
    found = detect_accelerator(root, V5E_BOARD_ENV)
    assert found is not None and (found.kind, found.count, found.model, found.spec) == (AcceleratorKind.TPU, 1, "v5e",
                                                                                         "v5e-1")
    assert "vfio" in found.source and "TPU_ACCELERATOR_TYPE=v5litepod-4" in found.source
    assert found.describe() == "TPU v5e-1 (1 chip)"
    # Without the type in the environment, Google's PCI vendor still says it is a TPU host.
    assert detect_accelerator(root, {}).count == 1
    # A numbered vfio group on a host that is not a TPU host is something else.
    assert detect_accelerator(_root(tmp_path / "other", dev=["vfio/7"]), {}) is None


def test_accel_device_files_and_visible_chips(tmp_path):
    root = _root(tmp_path, dev=["accel0", "accel1", "accel2", "accel3"])
    found = detect_accelerator(root, {"TPU_ACCELERATOR_TYPE": "v4-8"})
    assert (found.spec, found.count) == ("v4-8", 4)
    assert detect_accelerator(root, {"TPU_ACCELERATOR_TYPE": "v6e-8", "TPU_VISIBLE_CHIPS": "2"}).spec == "v6e-1"
    unknown = detect_accelerator(root, {})
    assert unknown.model is None and "generation unknown" in unknown.source
    with pytest.raises(ValueError, match="names no TPU type"):
        unknown.slot_request()


def test_gpus_from_the_driver_files_or_the_visible_devices_and_none_on_a_cpu_host(tmp_path):
    root = _root(tmp_path, dev=[f"nvidia{i}" for i in range(8)] + ["nvidiactl", "nvidia-uvm"],
                 gpu_model="NVIDIA H100 80GB HBM3")
    assert detect_accelerator(root, {}).spec == "gpu:H100:8"
    some = detect_accelerator(root, {"CUDA_VISIBLE_DEVICES": "4,5"})
    assert (some.count, some.devices) == (2, ("4", "5"))
    assert detect_accelerator(root, {"CUDA_VISIBLE_DEVICES": ""}) is None  # the user hid them
    # Hidden by a runner, the user's own value still says what the host has.
    hidden = {"CUDA_VISIBLE_DEVICES": "", SAVED: json.dumps({"CUDA_VISIBLE_DEVICES": None, "JAX_PLATFORMS": None})}
    assert detect_accelerator(root, hidden).count == 8
    assert detect_accelerator(_root(tmp_path / "cpu"), {}) is None


def test_what_a_configuration_states():
    assert parse_accelerator("none") is None
    tpu = parse_accelerator("v5litepod-4", source="stated")
    assert (tpu.spec, tpu.count, tpu.source) == ("v5e-4", 4, "stated")
    assert parse_accelerator("gpu:A100").describe() == "GPU A100 x1"
    assert parse_accelerator("gpu:H100:2", environ={"CUDA_VISIBLE_DEVICES": "6,7"}).devices == ("6", "7")
    with pytest.raises(ValueError, match="spans 4 hosts"):
        parse_accelerator("v5e-16")
    with pytest.raises(ValueError, match="unknown accelerator 'tpu'"):
        parse_accelerator("tpu")


def test_slots_split_the_devices_and_say_which_each_process_may_use():
    host = parse_accelerator("v5e-4")
    assert host.slots_needed(ResourceConfig.with_tpu("v5e-1")) == 1  # one process holds all the chips
    assert host.slot_env([0]) == {}
    split = host.with_slots(4)
    assert split.slot_request().type == "v5e-1"
    assert split.slots_needed(ResourceConfig.with_tpu("v5e-1")) == 1
    assert split.slots_needed(ResourceConfig.with_tpu("v5e-4")) == 4
    env = split.slot_env([2])
    assert (env["TPU_VISIBLE_CHIPS"], env["TPU_PROCESS_BOUNDS"], env["TPU_CHIPS_PER_PROCESS_BOUNDS"]) == ("2", "1,1,1",
                                                                                                          "1,1,1")
    assert split.slot_env([0])["TPU_MESH_CONTROLLER_PORT"] != env["TPU_MESH_CONTROLLER_PORT"]
    with pytest.raises(ValueError, match="cannot be split into 3"):
        host.with_slots(3)
    gpus = parse_accelerator("gpu:H100:8").with_slots(2)
    assert gpus.slots_needed(ResourceConfig.with_gpu("H100", 3)) == 1
    assert gpus.slots_needed(ResourceConfig.with_gpu("H100", 5)) == 2
    assert gpus.slot_env([1]) == {"CUDA_VISIBLE_DEVICES": "4,5,6,7"}
    with pytest.raises(ValueError, match=r"asks for TPU v5e-8 \(8 chips\) but this host has TPU v5e-4"):
        host.slots_needed(ResourceConfig.with_tpu("v5e-8"))
    with pytest.raises(ValueError, match="asks for GPU"):
        host.slots_needed(ResourceConfig.with_gpu("H100", 1))


def test_admission_takes_whole_slots_and_says_which():
    host = parse_accelerator("v5e-4", source="stated in a test")
    whole = AdmissionController(MachineCapacity(cpus=8, memory=2**30, accelerator=host))
    first = whole.try_admit(ResourceConfig.with_tpu("v5e-1"))
    assert first is not None and first.slots == (0,) and whole.accelerator_in_use
    assert whole.try_admit(ResourceConfig.with_tpu("v5e-1")) is None  # libtpu: one process for the host
    assert whole.try_admit(ResourceConfig()) is not None  # CPU jobs beside it
    first.release()
    assert not whole.accelerator_in_use
    split = AdmissionController(MachineCapacity(cpus=8, memory=2**30, accelerator=host.with_slots(4)))
    held = [split.try_admit(ResourceConfig.with_tpu("v5e-1")) for _ in range(4)]
    assert [a.slots for a in held if a is not None] == [(0,), (1,), (2,), (3,)]
    assert split.try_admit(ResourceConfig.with_tpu("v5e-1")) is None
    held[2].release()
    assert split.try_admit(ResourceConfig.with_tpu("v5e-1")).slots == (2,)
    with pytest.raises(ResourcesTooLarge, match=r"v5e-8 \(8 chips\) but this host has TPU v5e-4 \(4 chips\) "
                                                r"\(stated in a test\)"):
        whole.check_fits(ResourceConfig.with_tpu("v5e-8"))


def test_the_simulated_schedule_queues_accelerator_jobs_for_their_slot():
    host = MachineCapacity(cpus=8, memory=0, accelerator=parse_accelerator("v5e-4"))
    steps = [SimStep(f"t{i}", ResourceConfig.with_tpu("v5e-1"), 10.0) for i in range(3)]
    steps.append(SimStep("data", ResourceConfig(), 10.0))
    assert simulate(steps, SimCluster(1, host), priority=Priority.GIVEN_ORDER).makespan == 30.0
    split = MachineCapacity(cpus=8, memory=0, accelerator=parse_accelerator("v5e-4").with_slots(4))
    assert simulate(steps, SimCluster(1, split), priority=Priority.GIVEN_ORDER).makespan == 10.0


def test_hidden_processes_keep_the_users_values_and_give_them_back(monkeypatch):
    gpus = parse_accelerator("gpu:H100:4").with_slots(2)
    user = {"JAX_PLATFORMS": "cuda", "PATH": "/bin"}
    hidden = {**user, **hiding_env(user, gpus)}
    assert (hidden["JAX_PLATFORMS"], hidden["CUDA_VISIBLE_DEVICES"]) == ("cpu", "")
    assert users_environ(hidden) == user  # CUDA_VISIBLE_DEVICES was unset: unset again
    assert {**hidden, **hiding_env(hidden, gpus)} == hidden  # hiding twice keeps the user's values
    granted = granted_env(hidden, gpus, [1])
    assert granted == {"JAX_PLATFORMS": "cuda", "CUDA_VISIBLE_DEVICES": "2,3"}
    assert granted_env({}, parse_accelerator("v5e-1"), [0]) == {"JAX_PLATFORMS": ""}  # unset: JAX chooses
    monkeypatch.setenv("JAX_PLATFORMS", "tpu")
    monkeypatch.delenv(SAVED, raising=False)
    with accelerator_hidden(parse_accelerator("v5e-1")):
        assert os.environ["JAX_PLATFORMS"] == "cpu" and json.loads(os.environ[SAVED])["JAX_PLATFORMS"] == "tpu"
    assert os.environ["JAX_PLATFORMS"] == "tpu" and SAVED not in os.environ
    with accelerator_hidden(None):
        assert os.environ["JAX_PLATFORMS"] == "tpu"


def test_the_lock_holder_is_named_and_busy_errors_are_recognised(tmp_path):
    lock = str(tmp_path / "libtpu_lockfile")
    assert lock_holder(lock) is None  # no file: nobody opened the chip yet
    holder = hold_lock(lock, seconds=30)
    try:
        found = lock_holder(lock)
        assert found is not None and found.pid == holder.pid and "fcntl" in (found.command or "")
        assert found.describe().startswith(f"{lock} is held by pid {holder.pid} (")
    finally:
        holder.kill()
        holder.wait()
    assert lock_holder(lock) is None  # the file stays, unlocked
    assert busy_error(f"Traceback ...\nRuntimeError: {LIBTPU_HELD}\n").startswith("RuntimeError: Unable")
    assert busy_error("jaxlib.xla_extension.XlaRuntimeError: CUDA_ERROR_DEVICE_UNAVAILABLE: busy") is not None
    assert busy_error("ValueError: loss is nan") is None and busy_error(None) is None


def test_a_host_accelerator_validates_itself():
    with pytest.raises(ValueError, match="at least one device"):
        HostAccelerator(AcceleratorKind.GPU, 0)
    with pytest.raises(ValueError, match="slots must divide"):
        HostAccelerator(AcceleratorKind.GPU, 4, slots=3)
