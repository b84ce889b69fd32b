"""Summarise a ``jax.profiler`` trace (its Perfetto JSON): where a traced step's device time went.

Ops on the accelerator's "XLA Ops" lines (every op of the first device process when there is no
such line; a CPU's host threads when there is no device) are summed by name, and by kind: the
output softmax, attention, the MLP and projections (named by the model's Haiku scopes, which XLA
keeps in an op's long name), the optimizer, and the rest. An op counts its own time only: a
``while`` loop's span holds its body's ops on the same line, so the loop is charged what its body's
ops leave over (without that, a scanned model's time is counted twice). The splash attention
kernels (``splash_mha_fwd``, ``dkv``, ``dq``: JAX names their ops so) are also summed by kernel, the
share of attention that the kernels' tiles (``levanter.ops.splash_tiles``) decide. The copies
between host and device memory (an offloaded optimizer state's) are timed in flight and waited for.
"""

from __future__ import annotations

import collections
import glob
import gzip
import json
import os
import re
from typing import Any

from benchmarks.host_copies import HOST_SPACE
from levanter.ops.blocks import SCOPE

__all__ = ["summarise_trace"]

# Kind of an op, by the first of these words in its name or long name (lowercased).
# The loss's ops by their name scope (levanter.ops.blocks.SCOPE): their metadata names none of its functions.
_KINDS = (("splash", "attention"), ("attention", "attention"), (SCOPE, "loss"), ("mlp", "mlp"),
          ("attn", "attention projections"), ("adam", "optimizer"), ("optax", "optimizer"), ("clip", "optimizer"),
          ("embed", "embedding"), ("norm", "norms"))


def _kind(text: str) -> str:
    low = text.lower()
    return next((kind for word, kind in _KINDS if word in low), "other")


def _device_events(events: list[dict]) -> list[dict]:
    names = {(e.get("pid"), e.get("tid")): e.get("args", {}).get("name", "") for e in events
             if e.get("ph") == "M" and e.get("name") == "thread_name"}
    procs = {e.get("pid"): e.get("args", {}).get("name", "") for e in events
             if e.get("ph") == "M" and e.get("name") == "process_name"}
    device = {pid for pid, name in procs.items() if "/device:" in name and "CPU" not in name}
    # Python frames ("$file.py:line name") are the host's, never an op.
    spans = [e for e in events if e.get("ph") == "X" and not str(e.get("name", "")).startswith("$")]
    ops = [e for e in spans if e.get("pid") in device and "XLA Ops" in names.get((e.get("pid"), e.get("tid")), "")]
    if ops:
        return ops
    return [e for e in spans if e.get("pid") in device] or spans


def _self_times(events: list[dict]) -> list[float]:
    """Each event's duration less that of the events nested in it on its own line (pid, tid)."""
    start = [float(e.get("ts", 0.0)) for e in events]
    own = [float(e.get("dur", 0.0)) for e in events]
    end = [s + d for s, d in zip(start, own, strict=True)]
    lines: dict[tuple[Any, Any], list[int]] = collections.defaultdict(list)
    for i, e in enumerate(events):
        lines[(e.get("pid"), e.get("tid"))].append(i)
    for indices in lines.values():
        indices.sort(key=lambda i: (start[i], -end[i]))  # an enclosing span before what it holds
        stack: list[int] = []  # open spans, outermost first
        for i in indices:
            while stack and end[stack[-1]] <= start[i]:
                stack.pop()
            if stack:
                own[stack[-1]] -= end[i] - start[i]
            stack.append(i)
    return [max(t, 0.0) for t in own]


def _what(args: dict) -> str:
    """The framework op an XLA op came from (its ``tf_op``/``source`` metadata), short."""
    text = str(args.get("tf_op") or args.get("source") or "")
    return text if len(text) <= 90 else "..." + text[-87:]


def _splash(by_name: dict[str, float], total: float) -> tuple[dict[str, Any], list[str]]:
    """The splash kernels' share of ``total``, by kernel (an op's name less its ``.N`` suffix)."""
    kernels: collections.defaultdict[str, float] = collections.defaultdict(float)
    for name, us in by_name.items():
        if name.startswith("splash_"):
            kernels[re.sub(r"\.\d+$", "", name)] += us
    if not kernels:
        return {"share": 0.0, "ms": 0.0, "kernels": {}}, []
    shares = {k: round(us / total, 4) for k, us in _largest(kernels)}
    summary = {"share": round(sum(kernels.values()) / total, 4), "ms": round(sum(kernels.values()) / 1e3, 3),
               "kernels": shares}
    return summary, [f"splash kernels {summary['share']:.1%} ({summary['ms']:.1f} ms): "
                     + ", ".join(f"{k} {v:.1%}" for k, v in shares.items())]


def _copies(events: list[dict], own: list[float], total: float) -> tuple[dict[str, Any], list[str]]:
    """The asynchronous copies between host and device memory: how long they were in flight (each
    ``copy-start.N`` to its ``copy-done.N``) and how long the device waited in their ``copy-done``
    (an op's own time): what is in flight and not waited for ran under other ops. A copy is the host's
    when its ops' long names mark host memory; a trace without long names counts every copy."""
    starts: collections.defaultdict[str, list[int]] = collections.defaultdict(list)
    dones: collections.defaultdict[str, list[int]] = collections.defaultdict(list)
    for i, e in enumerate(events):
        kind, _, suffix = str(e.get("name", "")).partition(".")
        if kind in ("copy-start", "copy-done"):
            (starts if kind == "copy-start" else dones)[suffix].append(i)
    named = any("long_name" in (events[i].get("args") or {}) for ix in starts.values() for i in ix)
    flight = waited = 0.0
    pairs = 0
    for suffix, begun in starts.items():
        by_time = sorted(begun, key=lambda i: events[i]["ts"]), sorted(dones.get(suffix, []), key=lambda i: events[i]["ts"])
        for b, d in zip(*by_time, strict=False):  # a trace cut mid-copy has a start without its done
            text = " ".join(str((events[i].get("args") or {}).get("long_name", "")) for i in (b, d))
            if named and HOST_SPACE not in text:
                continue  # a copy between the chip's own memories
            pairs += 1
            flight += float(events[d]["ts"]) + float(events[d].get("dur", 0.0)) - float(events[b]["ts"])
            waited += own[d]
    summary = {"pairs": pairs, "host_named": named, "in_flight_ms": round(flight / 1e3, 3),
               "waited_ms": round(waited / 1e3, 3), "waited_share": round(waited / total, 4),
               "hidden": round(1 - waited / flight, 4) if flight else None}
    if not pairs:
        return summary, []
    what = "host<->device copies" if named else "copies (no long names: host and on-chip alike)"
    return summary, [f"{what}: {pairs}, in flight {flight / 1e3:.1f} ms, waited for in copy-done {waited / 1e3:.1f} ms "
                     f"({waited / total:.1%} of the traced time): {1 - waited / flight:.1%} hidden under other ops"]


def _largest(times: dict[str, float]) -> list[tuple[str, float]]:
    return sorted(times.items(), key=lambda kv: -kv[1])


def summarise_trace(trace_dir: str, top: int = 25) -> dict[str, Any]:
    """``{"total_ms", "ops": [[name, ms, share, source op]], "kinds": {kind: share}, "splash": {"share", "ms",
    "kernels": {kernel: share}}, "copies": {"pairs", "in_flight_ms", "waited_ms", "hidden", ...}, "lines": [...]}``
    of the newest Perfetto trace under ``trace_dir`` (empty when there is none)."""
    found = sorted(glob.glob(os.path.join(trace_dir, "**", "perfetto_trace.json.gz"), recursive=True))
    if not found:
        return {"total_ms": 0.0, "ops": [], "kinds": {}, "splash": _splash({}, 1.0)[0], "copies": _copies([], [], 1.0)[0],
                "lines": [f"no trace under {trace_dir}"]}
    with gzip.open(found[-1]) as f:
        data = json.load(f)
    events = _device_events(data["traceEvents"] if isinstance(data, dict) else data)
    by_name: collections.defaultdict[str, float] = collections.defaultdict(float)
    by_kind: collections.defaultdict[str, float] = collections.defaultdict(float)
    what: dict[str, str] = {}
    own = _self_times(events)
    for e, us in zip(events, own, strict=True):
        args = e.get("args") or {}
        long_name = " ".join(str(args.get(k, "")) for k in ("long_name", "tf_op", "hlo_op", "name"))
        by_name[e["name"]] += us
        by_kind[_kind(e["name"] + " " + long_name)] += us
        what.setdefault(e["name"], _what(args))
    total = sum(by_name.values()) or 1.0
    ops = [[name, round(us / 1e3, 3), round(us / total, 4), what[name]] for name, us in _largest(by_name)[:top]]
    kinds = {k: round(us / total, 4) for k, us in _largest(by_kind)}
    splash, splash_lines = _splash(by_name, total)
    copies, copy_lines = _copies(events, own, total)
    lines = [f"traced {total / 1e3:.1f} ms; by kind: " + ", ".join(f"{k} {v:.1%}" for k, v in kinds.items())]
    lines += splash_lines + copy_lines
    lines += [f"  {share:6.1%} {ms:9.3f} ms  {name}" + (f"  ({src})" if src else "") for name, ms, share, src in ops[:12]]
    return {"total_ms": round(total / 1e3, 3), "ops": ops, "kinds": kinds, "splash": splash, "copies": copies,
            "lines": lines}
