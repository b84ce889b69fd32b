from __future__ import annotations

import dataclasses

import pytest

from iris.cluster import TPU_TYPES, GpuConfig, ResourceConfig, TpuConfig, parse_memory


def test_defaults_are_one_cpu_on_one_host():
    r = ResourceConfig()
    assert (r.cpus, r.memory, r.accelerator, r.num_hosts) == (1.0, None, None, 1)
    assert r.to_ray_options() == {"num_cpus": 1.0, "max_retries": 0}


def test_config_is_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        ResourceConfig().cpus = 4  # type: ignore[misc]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"cpus": 0}, "cpus must be a number > 0, got 0"),
        ({"cpus": -2}, "got -2"),
        ({"memory": -1}, "memory must be None or an integer number of bytes >= 0, got -1"),
        ({"max_retries": -1}, "max_retries must be an integer >= 0, got -1"),
        ({"accelerator": "v5e-8"}, "accelerator must be None, GpuConfig or TpuConfig, got 'v5e-8'"),
        ({"preemptible": "yes"}, "preemptible must be True or False, got 'yes'"),
        ({"hosts": 0}, "hosts must be an integer >= 1, got 0"),
        ({"accelerator": TpuConfig("v4-32"), "hosts": 2}, "hosts must be 1 or 4 for TPU v4-32, got 2"),
    ],
)
def test_bad_values_are_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ResourceConfig(**kwargs)


def test_unknown_tpu_type_names_the_known_ones():
    with pytest.raises(ValueError) as info:
        ResourceConfig.with_tpu("v5e-7")
    text = str(info.value)
    assert "'v5e-7'" in text
    for known in ("v5e-8", "v4-32", "v6e-16", "v5p-8"):
        assert known in text


def test_gpu_validation():
    with pytest.raises(ValueError, match="GPU count must be an integer >= 1, got 0"):
        GpuConfig("A100", 0)
    with pytest.raises(ValueError, match="GPU type must be a non-empty string"):
        GpuConfig("")


def test_tpu_table():
    assert TPU_TYPES["v5e-8"].hosts == 1 and TPU_TYPES["v5e-8"].chips_per_host == 8
    assert TPU_TYPES["v5e-16"].hosts == 4 and TPU_TYPES["v5e-16"].chips == 16
    assert TPU_TYPES["v4-8"].hosts == 1 and TPU_TYPES["v4-8"].chips == 4
    assert TPU_TYPES["v4-32"].hosts == 4
    assert TpuConfig("v6e-256").hosts == 64


def test_memory_sizes():
    assert parse_memory("8GiB") == 8 * 2**30
    assert parse_memory("512MB") == 512 * 10**6
    assert parse_memory("1.5GiB") == int(1.5 * 2**30)
    assert parse_memory(1024) == 1024
    with pytest.raises(ValueError, match="got '8 parsecs'"):
        parse_memory("8 parsecs")
    assert ResourceConfig.with_cpu(4, memory="2GiB").memory == 2 * 2**30


def test_cpu_translation_to_ray():
    r = ResourceConfig.with_cpu(4, memory="1GiB", max_retries=2)
    assert r.to_ray_options() == {"num_cpus": 4, "memory": 2**30, "max_retries": 2}


def test_gpu_translation_to_ray():
    r = ResourceConfig.with_gpu("A100", 8, cpus=16)
    assert r.to_ray_options() == {"num_cpus": 16, "num_gpus": 8, "accelerator_type": "A100", "max_retries": 0}
    assert r.num_hosts == 1
    multi = ResourceConfig.with_gpu("H100", 8, hosts=4)
    assert multi.num_hosts == 4
    assert multi.ray_bundles() == [{"CPU": 1.0, "GPU": 8.0, "accelerator_type:H100": 0.001}] * 4


def test_single_host_tpu_translation_to_ray():
    r = ResourceConfig.with_tpu("v5e-8")
    assert r.preemptible and r.max_retries == 3
    assert r.to_ray_options() == {
        "num_cpus": 1,
        "max_retries": 3,
        "resources": {"TPU": 8, "TPU-v5litepod-8-head": 1},
    }


def test_multi_host_tpu_bundles():
    r = ResourceConfig.with_tpu("v4-32", cpus=8)
    assert r.num_hosts == 4
    bundles = r.ray_bundles()
    assert len(bundles) == 4
    assert bundles[0] == {"CPU": 8.0, "TPU": 4.0, "TPU-v4-32-head": 1.0}
    assert bundles[1:] == [{"CPU": 8.0, "TPU": 4.0}] * 3
    assert r.to_ray_options()["resources"] == {"TPU": 4}
