"""The fault proxy itself (``testsupport.faults``): seeded draws, per-kind rates, scripted faults,
the log, a resumable upload kept on the proxy, and a store that stays down."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from testsupport.faults import FaultKind, FaultProxy, Request, spread_rate


def _get(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            response.read()
            return response.status
    except urllib.error.HTTPError as e:
        return e.code


def test_a_rate_is_spread_over_every_kind_and_a_bad_one_is_refused():
    rates = spread_rate(0.05)
    assert set(rates) == set(FaultKind) and sum(rates.values()) == pytest.approx(0.05)
    assert rates[FaultKind.UNAVAILABLE_AFTER_WRITE] > rates[FaultKind.UNAVAILABLE]  # it applies to writes only
    for bad in (-0.1, 1.0, 2.0):
        with pytest.raises(ValueError, match="the fault rate must be in"):
            spread_rate(bad)
    with pytest.raises(ValueError, match="sum to less than 1"):
        FaultProxy("http://127.0.0.1:1", rates={FaultKind.UNAVAILABLE: 0.6, FaultKind.THROTTLED: 0.5})


def test_seeded_draws_fault_the_same_requests_with_the_same_kinds(strict_gcs_emulator):
    rates = {FaultKind.THROTTLED: 0.2, FaultKind.UNAVAILABLE_RETRY_AFTER: 0.2}

    def draws(seed: int) -> list[tuple[int, str]]:
        with FaultProxy(strict_gcs_emulator.url, rates=rates, seed=seed) as proxy:
            statuses = [_get(f"{proxy.url}/storage/v1/b?project=test") for _ in range(40)]
            assert proxy.count() == 40
            assert len(proxy.log) == sum(1 for s in statuses if s != 200)
            return [(s, proxy.log[i].kind.value) for i, s in enumerate(x for x in statuses if x != 200)]

    first = draws(7)
    assert first == draws(7) and first != draws(8)
    assert {kind for _, kind in first} == {"429", "503-retry-after"}
    assert all((status, kind) in ((429, "429"), (503, "503-retry-after")) for status, kind in first)
    assert 4 <= len(first) <= 30


def test_scripted_faults_hit_the_requests_they_name_in_order_and_are_logged(strict_gcs_emulator):
    bucket = strict_gcs_emulator.create_bucket()[len("gs://"):]
    with FaultProxy(strict_gcs_emulator.url) as proxy:
        proxy.inject(FaultKind.UNAVAILABLE, match=lambda r: r.object_name == "a/b.json", times=2)
        assert proxy.pending() == 2
        assert _get(f"{proxy.url}/storage/v1/b/{bucket}/o/other") == 404  # not named: served
        assert _get(f"{proxy.url}/storage/v1/b/{bucket}/o/a%2Fb.json") == 503
        assert _get(f"{proxy.url}/storage/v1/b/{bucket}/o/a%2Fb.json") == 503
        assert _get(f"{proxy.url}/storage/v1/b/{bucket}/o/a%2Fb.json") == 404  # used up
        assert proxy.pending() == 0 and proxy.counts() == {"503": 2}
        assert str(proxy.log[0]).split()[1:] == ["503", "GET", f"/storage/v1/b/{bucket}/o/a%2Fb.json", "(a/b.json)"]


def test_a_resumable_upload_goes_on_through_the_proxy(strict_gcs_emulator):
    bucket = strict_gcs_emulator.create_bucket()[len("gs://"):]
    with FaultProxy(strict_gcs_emulator.url) as proxy:
        start = urllib.request.Request(f"{proxy.url}/upload/storage/v1/b/{bucket}/o?uploadType=resumable&name=big",
                                       data=json.dumps({"name": "big"}).encode(), method="POST",
                                       headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(start, timeout=10) as response:
            location = response.headers["Location"]
        assert location.startswith(proxy.url + "/"), location  # not the emulator's own address
        assert proxy.upload_sessions() == {"open": 1}
        part = urllib.request.Request(location, data=b"x" * 10, method="PUT",
                                      headers={"Content-Range": "bytes 0-9/10"})
        with urllib.request.urlopen(part, timeout=10) as response:
            assert json.loads(response.read())["size"] == "10"
        assert proxy.count() == 2 and proxy.upload_sessions() == {"finished": 1}


def test_a_store_that_is_down_answers_503_to_everything_until_it_is_up(strict_gcs_emulator):
    with FaultProxy(strict_gcs_emulator.url) as proxy:
        proxy.set_down(503)
        assert [_get(f"{proxy.url}/storage/v1/b?project=test") for _ in range(3)] == [503, 503, 503]
        proxy.set_down(None)
        assert _get(f"{proxy.url}/storage/v1/b?project=test") == 200


def test_a_request_names_its_object_from_its_url_or_its_multipart_body():
    def named(target: str, body: bytes = b"", method: str = "GET") -> str:
        return Request(method, target, {}, body).object_name

    assert named("/download/storage/v1/b/bkt/o/a%2Fb%20c?alt=media") == "a/b c"
    assert named("/upload/storage/v1/b/bkt/o?uploadType=resumable&name=x%2Fy") == "x/y"
    multipart = b'--==0==\r\nContent-Type: application/json\r\n\r\n{"name": "d/e.json"}\r\n--==0==\r\n\r\ndata'
    assert named("/upload/storage/v1/b/bkt/o?uploadType=multipart", multipart, "POST") == "d/e.json"
    assert named("/storage/v1/b/bkt/o?prefix=p%2F&delimiter=%2F") == "p/"
    assert Request("POST", "/x", {}, b"").is_write and not Request("GET", "/x", {}, b"").is_write
    assert FaultKind.TRUNCATED.applies_to(Request("GET", "/x", {}, b""))
    assert not FaultKind.UNAVAILABLE_AFTER_WRITE.applies_to(Request("GET", "/x", {}, b""))
