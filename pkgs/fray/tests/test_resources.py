"""ResourceConfig as Marin's files write it: one class in fray, Marin's keywords and TPU names."""

from __future__ import annotations

import pytest

from fray.cluster import ANY_REGION, ResourceConfig
from fray.resources import TPU_TYPES, GpuConfig, TpuConfig


def test_one_class_under_every_name():
    import fray
    import fray.types
    import iris
    import iris.cluster

    assert ResourceConfig is fray.ResourceConfig is fray.types.ResourceConfig is iris.cluster.ResourceConfig
    assert ResourceConfig is iris.ResourceConfig
    assert ANY_REGION == fray.types.ANY_REGION == iris.cluster.ANY_REGION


def test_marin_keywords_are_the_same_fields():
    r = ResourceConfig.with_cpu(cpu=4, ram="16g", disk="10g", regions=["us-central2"], zone="us-central2-b")
    assert (r.cpus, r.cpu, r.memory, r.disk) == (4, 4, 16 * 2**30, 10 * 2**30)
    assert (r.regions, r.zone) == (("us-central2",), "us-central2-b")
    assert r == ResourceConfig(cpus=4, memory=16 * 2**30, disk=10 * 2**30, regions=("us-central2",),
                               zone="us-central2-b")
    assert ResourceConfig.with_cpu() == ResourceConfig()
    assert ResourceConfig(regions=[ANY_REGION]).regions == ("*",)


def test_gpu_and_tpu_as_marin_writes_them():
    gpu = ResourceConfig.with_gpu("H100", count=8, cpu=32, disk="128G", ram="128G")
    assert gpu.accelerator == GpuConfig("H100", 8) and gpu.cpus == 32 and gpu.memory == 128 * 2**30
    assert ResourceConfig.with_gpu("A100", count=4, replicas=2).num_hosts == 2
    assert "accelerator_type" not in ResourceConfig.with_gpu().to_ray_options()
    auto = ResourceConfig.with_gpu("auto", count=2, cpu=16, disk="64G", ram="60G")
    assert (auto.gpus_per_host, auto.cpus, auto.disk, auto.memory) == (2, 16, 64 * 2**30, 60 * 2**30)
    tpu = ResourceConfig.with_tpu("v5litepod-16", slice_count=1, cpu=32, ram="128g", disk="50g")
    assert tpu.accelerator == TpuConfig("v5litepod-16") and (tpu.num_hosts, tpu.tpu_chips_per_host) == (4, 4)
    assert TPU_TYPES["v5litepod-16"] is TPU_TYPES["v5e-16"]
    assert ResourceConfig.with_tpu("v6e-4").num_hosts == 1 and ResourceConfig.with_tpu("v4-32").num_hosts == 4
    assert ResourceConfig.with_tpu(["v6e-8"]).accelerator == TpuConfig("v6e-8")


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: ResourceConfig(cpus=2, cpu=3), "give cpus= or cpu=, not both"),
        (lambda: ResourceConfig(memory=1, ram="1g"), "give memory= or ram=, not both"),
        (lambda: ResourceConfig(disk="lots"), "memory must be bytes or a size like '8GiB', got 'lots'"),
        (lambda: ResourceConfig(regions=[]), "regions must be None or a non-empty list of region names, got ()"),
        (lambda: ResourceConfig(zone=""), "zone must be None or a zone name, got ''"),
        (lambda: ResourceConfig.with_tpu("v4-8", slice_count=2), "slice_count must be 1 .*got 2"),
        (lambda: ResourceConfig.with_tpu(["v6e-4", "v6e-8"]), "alternative TPU types are not supported"),
        (lambda: ResourceConfig.with_tpu("v5litepod-3"), "unknown TPU type 'v5litepod-3'"),
    ],
)
def test_bad_requests_are_named(build, message):
    with pytest.raises(ValueError, match=message):
        build()


def test_replace_keeps_marin_fields():
    r = ResourceConfig.with_cpu(cpu=2, disk="1g", zone="z").replace(cpus=3)
    assert (r.cpus, r.disk, r.zone) == (3, 2**30, "z")
