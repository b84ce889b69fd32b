// marin report: draws the step graph, the provenance panel, the training charts and the steps
// table from the JSON embedded in the page. No libraries, no network: plain DOM and SVG.
(function () {
  "use strict";

  var DATA = JSON.parse(document.getElementById("report-data").textContent);
  var STEPS = DATA.steps;
  var SVGNS = "http://www.w3.org/2000/svg";
  var STATE_ORDER = ["failed", "upstream failed", "interrupted", "running", "would run", "ran", "cached", "unneeded"];
  var SERIES_COLORS = { loss: "#2f5fd0", val_loss: "#e0662f", lr: "#1f9d55", tokens_per_s: "#8a5cd6",
                        grad_norm: "#b8860b", mfu: "#0f9fb5" };
  var selected = -1;
  // Groups (steps by name folder) bigger than this start collapsed into one node and one row.
  var GROUP_OPEN_MAX = 8;
  var NULLABLE = ["fn", "version", "config", "started_at", "finished_at", "duration_s", "attempts", "host",
                  "output_bytes", "output_files", "error", "traceback", "log_path", "log_tail", "note",
                  "metrics", "tokenized", "data", "estimate_s", "estimate_basis"];
  // Colours of a consolidate step's filters in its bar (kept documents are green).
  var FILTER_COLORS = ["#d93636", "#e0662f", "#b8860b", "#8a5cd6", "#0f9fb5", "#d0417e", "#5d6d7e"];
  // The page leaves empty fields out and names each build environment once: fill them back in.
  STEPS.forEach(function (st) {
    ["deps", "reasons", "built_because"].forEach(function (k) { if (!st[k]) st[k] = []; });
    NULLABLE.forEach(function (k) { if (st[k] === undefined) st[k] = null; });
    st.short_hash = st.hash.slice(0, 8);
    if (!st.output_path) st.output_path = DATA.prefix.replace(/\/+$/, "") + "/" + st.name + "-" + st.hash.slice(0, 16);
    st.environment = st.env !== undefined ? DATA.environments[st.env] : null;
  });
  var GROUPS = (DATA.groups || [""]).map(function (name) { return { name: name, members: [], open: false }; });
  STEPS.forEach(function (st, i) { GROUPS[st.group || 0].members.push(i); });
  GROUPS.forEach(function (g) { g.open = g.members.length <= GROUP_OPEN_MAX; });

  // -- small helpers ------------------------------------------------------------------------
  function stateKey(state) { return String(state).replace(/[^a-z]+/g, "-"); }

  function h(tag, attrs) {
    var node = document.createElement(tag);
    setAttrs(node, attrs);
    for (var i = 2; i < arguments.length; i++) append(node, arguments[i]);
    return node;
  }

  function s(tag, attrs) {
    var node = document.createElementNS(SVGNS, tag);
    setAttrs(node, attrs);
    for (var i = 2; i < arguments.length; i++) append(node, arguments[i]);
    return node;
  }

  function setAttrs(node, attrs) {
    if (!attrs) return;
    Object.keys(attrs).forEach(function (k) {
      var v = attrs[k];
      if (v === null || v === undefined || v === false) return;
      if (k === "text") node.textContent = v;
      else if (k.slice(0, 2) === "on") node.addEventListener(k.slice(2), v);
      else node.setAttribute(k, v === true ? "" : String(v));
    });
  }

  function append(node, child) {
    if (child === null || child === undefined || child === false) return;
    if (Array.isArray(child)) { child.forEach(function (c) { append(node, c); }); return; }
    node.appendChild(typeof child === "object" ? child : document.createTextNode(String(child)));
  }

  function fmtBytes(n) {
    if (n === null || n === undefined) return "–";
    var units = ["B", "KiB", "MiB", "GiB", "TiB"];
    var i = 0;
    while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
    return (i === 0 ? n : n.toFixed(n < 10 ? 2 : 1)) + " " + units[i];
  }

  function fmtDuration(sec) {
    if (sec === null || sec === undefined) return "–";
    if (sec < 1) return (sec * 1000).toFixed(0) + " ms";
    if (sec < 60) return sec.toFixed(sec < 10 ? 2 : 1) + " s";
    var m = Math.floor(sec / 60), r = Math.round(sec % 60);
    if (m < 60) return m + "m " + r + "s";
    return Math.floor(m / 60) + "h " + (m % 60) + "m";
  }

  function fmtTime(ts) {
    if (!ts) return "–";
    var d = new Date(ts * 1000);
    function p(x) { return (x < 10 ? "0" : "") + x; }
    return d.getFullYear() + "-" + p(d.getMonth() + 1) + "-" + p(d.getDate()) + " " +
      p(d.getHours()) + ":" + p(d.getMinutes()) + ":" + p(d.getSeconds());
  }

  function fmtNum(v) {
    if (v === null || v === undefined) return "–";
    var a = Math.abs(v);
    if (a !== 0 && (a >= 1e6 || a < 1e-3)) return v.toExponential(2);
    if (Number.isInteger(v)) return v.toLocaleString("en-US");
    return a >= 100 ? v.toFixed(1) : a >= 1 ? v.toFixed(3) : v.toPrecision(3);
  }

  function fmtCount(v) { return v === null || v === undefined ? "–" : Number(v).toLocaleString("en-US"); }

  function badge(state) {
    return h("span", { "class": "badge s-" + stateKey(state) }, h("span", { "class": "dot" }), state);
  }

  // -- graph layout: layers by longest path from the sources, order by barycentres -----------
  function layout(steps) {
    var n = steps.length, i, j;
    var children = steps.map(function () { return []; });
    var indeg = steps.map(function (st) { return st.deps.length; });
    steps.forEach(function (st, k) { st.deps.forEach(function (d) { children[d].push(k); }); });
    var layer = new Array(n).fill(0), queue = [], order = [], seen = new Array(n).fill(false);
    for (i = 0; i < n; i++) if (indeg[i] === 0) queue.push(i);
    for (var head = 0; head < queue.length || order.length < n; head++) {
      if (head >= queue.length) {
        // Collapsed groups can make a cycle (a -> B -> a2): place its first unplaced member anyway.
        for (i = 0; i < n; i++) if (!seen[i]) { queue.push(i); indeg[i] = 0; break; }
      }
      var v = queue[head];
      if (seen[v]) continue;
      seen[v] = true;
      order.push(v);
      children[v].forEach(function (c) {
        if (seen[c]) return;
        layer[c] = Math.max(layer[c], layer[v] + 1);
        if (--indeg[c] === 0) queue.push(c);
      });
    }
    var layers = [];
    order.forEach(function (v) { (layers[layer[v]] = layers[layer[v]] || []).push(v); });
    var pos = new Array(n).fill(0);
    function place() { layers.forEach(function (l) { l.forEach(function (v, k) { pos[v] = k; }); }); }
    function bary(v, nbrs) {
      if (!nbrs.length) return pos[v];
      var sum = 0;
      nbrs.forEach(function (u) { sum += pos[u]; });
      return sum / nbrs.length;
    }
    place();
    for (var sweep = 0; sweep < 6; sweep++) {
      var down = sweep % 2 === 0;
      for (j = down ? 1 : layers.length - 2; down ? j < layers.length : j >= 0; j += down ? 1 : -1) {
        var keys = {};
        layers[j].forEach(function (v) { keys[v] = bary(v, down ? steps[v].deps : children[v]); });
        layers[j].sort(function (a, b) { return keys[a] - keys[b] || a - b; });
        layers[j].forEach(function (v, k) { pos[v] = k; });
      }
    }
    return { layers: layers, layer: layer, pos: pos, children: children };
  }

  var NODE_W = 210, NODE_H = 50, GAP_X = 70, GAP_Y = 22, PAD = 20;

  function truncate(text, max) { return text.length <= max ? text : "…" + text.slice(text.length - max + 1); }

  function groupCounts(g) {
    var counts = {};
    g.members.forEach(function (i) { counts[STEPS[i].state] = (counts[STEPS[i].state] || 0) + 1; });
    return counts;
  }

  function countsText(counts) {
    return STATE_ORDER.filter(function (st) { return counts[st]; })
      .map(function (st) { return counts[st] + " " + st; }).join(" · ");
  }

  function worstState(counts) {
    for (var k = 0; k < STATE_ORDER.length; k++) if (counts[STATE_ORDER[k]]) return STATE_ORDER[k];
    return "cached";
  }

  function groupLabel(g) { return g.name === "" ? "(top level)" : g.name + "/"; }

  function setGroupOpen(gi, open) {
    if (GROUPS[gi].open === open) return;
    GROUPS[gi].open = open;
    redraw();
  }

  // What the graph shows: every step of an open group, one node per closed group.
  function visibleItems() {
    var items = [], itemOf = new Array(STEPS.length);
    GROUPS.forEach(function (g, gi) {
      if (!g.open) {
        var k = items.length;
        items.push({ group: gi, deps: [] });
        g.members.forEach(function (i) { itemOf[i] = k; });
      }
    });
    STEPS.forEach(function (st, i) {
      if (GROUPS[st.group || 0].open) { itemOf[i] = items.length; items.push({ step: i, deps: [] }); }
    });
    var seenEdge = {};
    STEPS.forEach(function (st, i) {
      st.deps.forEach(function (d) {
        var a = itemOf[d], b = itemOf[i], key = a + ">" + b;
        if (a !== b && !seenEdge[key]) { seenEdge[key] = true; items[b].deps.push(a); }
      });
    });
    return items;
  }

  function drawGraph() {
    var box = document.getElementById("graph");
    while (box.firstChild) box.removeChild(box.firstChild);
    if (!STEPS.length) { box.appendChild(h("p", { "class": "hint", text: "No steps." })); return; }
    var items = visibleItems();
    var L = layout(items);
    var tallest = Math.max.apply(null, L.layers.map(function (l) { return l.length; }));
    var width = PAD * 2 + L.layers.length * NODE_W + (L.layers.length - 1) * GAP_X;
    var height = PAD * 2 + tallest * NODE_H + (tallest - 1) * GAP_Y;
    var xy = items.map(function (_, v) {
      var col = L.layers[L.layer[v]];
      var offset = (tallest - col.length) * (NODE_H + GAP_Y) / 2;
      return [PAD + L.layer[v] * (NODE_W + GAP_X), PAD + offset + L.pos[v] * (NODE_H + GAP_Y)];
    });
    var svg = s("svg", { width: width, height: height, viewBox: "0 0 " + width + " " + height,
                         role: "img", "aria-label": "step graph", id: "graph-svg" });
    svg.appendChild(s("defs", null, s("marker", { id: "arrow", viewBox: "0 0 10 10", refX: 9, refY: 5,
      markerWidth: 9, markerHeight: 9, markerUnits: "userSpaceOnUse", orient: "auto-start-reverse" },
      s("path", { d: "M0,0 L10,5 L0,10 z", fill: "#9aa5b4" }))));
    function ref(item) { return item.step !== undefined ? item.step : "g" + item.group; }
    var edges = s("g", { "class": "edges" });
    items.forEach(function (it, v) {
      it.deps.forEach(function (d) {
        var x1 = xy[d][0] + NODE_W, y1 = xy[d][1] + NODE_H / 2, x2 = xy[v][0], y2 = xy[v][1] + NODE_H / 2;
        var c = Math.max(24, (x2 - x1) / 2);
        edges.appendChild(s("path", { "class": "edge", "data-from": ref(items[d]), "data-to": ref(it), "marker-end": "url(#arrow)",
          d: "M" + x1 + "," + y1 + " C" + (x1 + c) + "," + y1 + " " + (x2 - c) + "," + y2 + " " + x2 + "," + y2 }));
      });
    });
    svg.appendChild(edges);
    var nodes = s("g", { "class": "nodes" });
    items.forEach(function (it, v) {
      var g;
      if (it.group !== undefined) {
        var grp = GROUPS[it.group], counts = groupCounts(grp), open = function () { setGroupOpen(it.group, true); };
        g = s("g", { "class": "group n-" + stateKey(worstState(counts)), "data-group": grp.name,
                     "data-count": grp.members.length, tabindex: 0, role: "button",
                     transform: "translate(" + xy[v][0] + "," + xy[v][1] + ")", onclick: open,
                     onkeydown: function (e) { if (e.key === "Enter" || e.key === " ") { e.preventDefault(); open(); } } },
          s("title", { text: groupLabel(grp) + ": " + grp.members.length + " steps (" + countsText(counts) + "); click to expand" }),
          s("rect", { "class": "box", width: NODE_W, height: NODE_H, rx: 7, ry: 7 }),
          s("rect", { "class": "box stack", x: 4, y: 4, width: NODE_W - 8, height: NODE_H - 8, rx: 5, ry: 5 }),
          s("rect", { "class": "stripe", x: 0, y: 0, width: 6, height: NODE_H, rx: 3 }),
          s("text", { "class": "label", x: 15, y: 21, text: truncate(groupLabel(grp), 18) + " ×" + grp.members.length }),
          s("text", { "class": "sub", x: 15, y: 39, text: truncate(countsText(counts), 30) }));
      } else {
        var i = it.step, st = STEPS[i];
        g = s("g", { "class": "node n-" + stateKey(st.state), "data-id": i, "data-name": st.name,
                     "data-state": st.state, "data-hash": st.short_hash, tabindex: 0, role: "button",
                     transform: "translate(" + xy[v][0] + "," + xy[v][1] + ")",
                     onclick: function () { select(i, true); },
                     onkeydown: function (e) { if (e.key === "Enter" || e.key === " ") { e.preventDefault(); select(i, true); } } },
          s("title", { text: st.name + " (" + st.state + ")\n" + st.hash }),
          s("rect", { "class": "box", width: NODE_W, height: NODE_H, rx: 7, ry: 7 }),
          s("rect", { "class": "stripe", x: 0, y: 0, width: 6, height: NODE_H, rx: 3 }),
          s("text", { "class": "label", x: 15, y: 21, text: truncate(st.name, 25) }),
          s("text", { "class": "sub mono", x: 15, y: 39, text: st.short_hash + " · " + st.state }));
      }
      nodes.appendChild(g);
    });
    svg.appendChild(nodes);
    box.appendChild(svg);
    // Shrink a slightly-too-wide graph to fit its card; a much wider one scrolls instead.
    var room = box.clientWidth - 2;
    if (room > 0 && width > room && room / width >= 0.6) {
      svg.setAttribute("width", room);
      svg.setAttribute("height", Math.round(height * room / width));
    }
  }

  // -- charts ---------------------------------------------------------------------------------
  function niceTicks(lo, hi, count) {
    if (!(hi > lo)) { var pad = Math.abs(lo) * 0.1 || 1; lo -= pad; hi += pad; }
    var raw = (hi - lo) / count, mag = Math.pow(10, Math.floor(Math.log10(raw))), r = raw / mag;
    var step = (r >= 5 ? 10 : r >= 2 ? 5 : r >= 1 ? 2 : 1) * mag;
    if (r < 1.5) step = mag;
    var first = Math.floor(lo / step) * step, last = Math.ceil(hi / step) * step, ticks = [];
    for (var t = first; t <= last + step * 1e-9; t += step) ticks.push(Number(t.toPrecision(12)));
    return ticks;
  }

  function lineChart(title, series, opts) {
    opts = opts || {};
    var W = 460, H = 220, M = { l: 58, r: 14, t: 10, b: 34 };
    var pw = W - M.l - M.r, ph = H - M.t - M.b;
    var all = [];
    series.forEach(function (sr) { all = all.concat(sr.points); });
    var xs = all.map(function (p) { return p[0]; }), ys = all.map(function (p) { return p[1]; });
    var xt = niceTicks(Math.min.apply(null, xs), Math.max.apply(null, xs), 5);
    var yt = niceTicks(Math.min.apply(null, ys), Math.max.apply(null, ys), 4);
    var x0 = xt[0], x1 = xt[xt.length - 1], y0 = yt[0], y1 = yt[yt.length - 1];
    function X(x) { return M.l + (x - x0) / (x1 - x0) * pw; }
    function Y(y) { return M.t + ph - (y - y0) / (y1 - y0) * ph; }
    var svg = s("svg", { viewBox: "0 0 " + W + " " + H, "class": "chart-svg", "data-chart": opts.key || title });
    var grid = s("g", { "class": "grid" }), axis = s("g", { "class": "axis" });
    yt.forEach(function (t) {
      grid.appendChild(s("line", { x1: M.l, x2: M.l + pw, y1: Y(t), y2: Y(t) }));
      axis.appendChild(s("text", { x: M.l - 6, y: Y(t) + 3.5, "text-anchor": "end", text: fmtNum(t) }));
    });
    xt.forEach(function (t) {
      grid.appendChild(s("line", { x1: X(t), x2: X(t), y1: M.t, y2: M.t + ph }));
      axis.appendChild(s("text", { x: X(t), y: M.t + ph + 15, "text-anchor": "middle", text: fmtNum(t) }));
    });
    axis.appendChild(s("line", { x1: M.l, x2: M.l + pw, y1: M.t + ph, y2: M.t + ph }));
    axis.appendChild(s("line", { x1: M.l, x2: M.l, y1: M.t, y2: M.t + ph }));
    axis.appendChild(s("text", { x: M.l + pw / 2, y: H - 3, "text-anchor": "middle", text: "step" }));
    svg.appendChild(grid);
    svg.appendChild(axis);
    var legend = h("span", { "class": "chart-legend" });
    series.forEach(function (sr) {
      var d = sr.points.map(function (p, k) { return (k ? "L" : "M") + X(p[0]).toFixed(2) + "," + Y(p[1]).toFixed(2); }).join(" ");
      svg.appendChild(s("path", { "class": "series", d: d, stroke: sr.color, "data-series": sr.key,
                                  "data-points": sr.points.length }));
      if (sr.points.length <= 40) {
        sr.points.forEach(function (p) {
          svg.appendChild(s("circle", { cx: X(p[0]), cy: Y(p[1]), r: 2.4, fill: sr.color }));
        });
      }
      legend.appendChild(h("span", null, h("i", { style: "background:" + sr.color }), sr.label));
    });
    // Hover: a cursor at the nearest logged step with every series' value there.
    var cursor = s("line", { "class": "cursor", y1: M.t, y2: M.t + ph, visibility: "hidden" });
    var tipBg = s("rect", { "class": "tip-bg", rx: 4, visibility: "hidden" });
    var tip = s("text", { "class": "tip", visibility: "hidden" });
    svg.appendChild(cursor); svg.appendChild(tipBg); svg.appendChild(tip);
    var overlay = s("rect", { x: M.l, y: M.t, width: pw, height: ph, fill: "transparent" });
    function nearest(points, x) {
      var lo = 0, hi = points.length - 1;
      while (lo < hi) { var mid = (lo + hi) >> 1; if (points[mid][0] < x) lo = mid + 1; else hi = mid; }
      if (lo > 0 && Math.abs(points[lo - 1][0] - x) < Math.abs(points[lo][0] - x)) lo--;
      return points[lo];
    }
    overlay.addEventListener("mousemove", function (e) {
      var m = svg.getScreenCTM();
      if (!m) return;
      var pt = svg.createSVGPoint(); pt.x = e.clientX; pt.y = e.clientY;
      var x = x0 + (pt.matrixTransform(m.inverse()).x - M.l) / pw * (x1 - x0);
      var anchor = nearest(series[0].points, x);
      var lines = ["step " + fmtNum(anchor[0])];
      series.forEach(function (sr) {
        var p = nearest(sr.points, anchor[0]);
        if (p[0] === anchor[0]) lines.push(sr.label + " " + fmtNum(p[1]));
      });
      cursor.setAttribute("x1", X(anchor[0])); cursor.setAttribute("x2", X(anchor[0]));
      while (tip.firstChild) tip.removeChild(tip.firstChild);
      var tx = X(anchor[0]) + 8, right = tx > M.l + pw * 0.6;
      lines.forEach(function (line, k) { tip.appendChild(s("tspan", { x: 0, dy: k ? 13 : 0, text: line })); });
      tip.setAttribute("visibility", "visible");
      var bb = tip.getBBox();
      var left = right ? X(anchor[0]) - 8 - bb.width : tx;
      tip.setAttribute("transform", "translate(" + left + "," + (M.t + 14) + ")");
      tipBg.setAttribute("x", left - 4); tipBg.setAttribute("y", M.t + 14 + bb.y - 3);
      tipBg.setAttribute("width", bb.width + 8); tipBg.setAttribute("height", bb.height + 6);
      [cursor, tipBg].forEach(function (n) { n.setAttribute("visibility", "visible"); });
    });
    overlay.addEventListener("mouseleave", function () {
      [cursor, tipBg, tip].forEach(function (n) { n.setAttribute("visibility", "hidden"); });
    });
    svg.appendChild(overlay);
    return h("div", { "class": "chart" }, h("div", { "class": "chart-title" }, h("span", { text: title }), legend), svg);
  }

  var CHARTS = [
    { key: "loss", title: "Loss", series: [["loss", "train"], ["val_loss", "validation"]] },
    { key: "lr", title: "Learning rate", series: [["lr", "lr"]] },
    { key: "tokens_per_s", title: "Throughput (tokens/s)", series: [["tokens_per_s", "tokens/s"]] },
    { key: "grad_norm", title: "Gradient norm", series: [["grad_norm", "grad norm"]] },
    { key: "mfu", title: "MFU", series: [["mfu", "mfu"]] }
  ];

  function trainingCharts(st, only) {
    var wrap = h("div", { "class": "charts" });
    CHARTS.forEach(function (spec) {
      if (only && only.indexOf(spec.key) < 0) return;
      var series = [];
      spec.series.forEach(function (pair) {
        var pts = st.metrics.series[pair[0]];
        if (pts && pts.length) series.push({ key: pair[0], label: pair[1], points: pts, color: SERIES_COLORS[pair[0]] });
      });
      if (series.length) wrap.appendChild(lineChart(spec.title, series, { key: spec.key }));
    });
    return wrap;
  }

  // -- the provenance panel -------------------------------------------------------------------
  function kvTable(rows) {
    return h("table", { "class": "kv" }, rows.filter(function (r) { return r[1] !== null && r[1] !== undefined && r[1] !== ""; })
      .map(function (r) { return h("tr", null, h("th", { text: r[0] }), h("td", null, r[1])); }));
  }

  function highlightJson(value) {
    var text = JSON.stringify(value, null, 2);
    var pre = h("pre", { "class": "config", "data-role": "config" });
    var re = /("(?:\\.|[^"\\])*")(\s*:)?|\b(true|false|null)\b|(-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)/g, last = 0, m;
    while ((m = re.exec(text)) !== null) {
      append(pre, text.slice(last, m.index));
      if (m[1]) {
        append(pre, h("span", { "class": m[2] ? "k" : "s", text: m[1] }));
        if (m[2]) append(pre, m[2]);
      } else if (m[3]) append(pre, h("span", { "class": "l", text: m[3] }));
      else append(pre, h("span", { "class": "n", text: m[4] }));
      last = re.lastIndex;
    }
    append(pre, text.slice(last));
    return pre;
  }

  function envTable(env) {
    var rows = [];
    Object.keys(env).forEach(function (k) {
      if (k === "packages") return;
      var v = env[k];
      rows.push([k, v === null ? "–" : String(v)]);
    });
    var pk = env.packages || {};
    var pkgs = Object.keys(pk).filter(function (k) { return pk[k]; }).map(function (k) { return k + " " + pk[k]; }).join(", ");
    if (pkgs) rows.push(["packages", h("span", { "class": "mono", text: pkgs })]);
    return kvTable(rows);
  }

  function reasonsBlock(st) {
    var out = [];
    var label = { "ran": "Why it ran", "would run": "Why it would run", "failed": "Why it ran",
                  "interrupted": "Why it ran", "running": "Why it runs", "upstream failed": "Why it would run" };
    if (st.reasons.length) {
      out.push(h("h3", { text: label[st.state] || "Reasons" }));
      out.push(h("ul", { "class": "reasons", "data-role": "reasons" }, st.reasons.map(function (r) { return h("li", { text: r }); })));
    } else if (st.state === "cached") {
      out.push(h("h3", { text: "Why" }));
      out.push(h("p", { "data-role": "reasons", text: "Cached: built earlier at this hash, reused as is." }));
    }
    if (st.built_because.length && st.state === "cached") {
      out.push(h("p", { "class": "hint", text: "It was built because: " + st.built_because.join("; ") }));
    }
    if (st.note) out.push(h("p", { "class": "hint", text: "Note: " + st.note }));
    return out;
  }

  function errorBlock(st) {
    if (!st.error && !st.traceback && !st.log_tail) return null;
    var box = h("div", { "class": "error-box", "data-role": "error" });
    if (st.error) box.appendChild(h("div", { "class": "error-msg", text: st.error }));
    if (st.traceback) box.appendChild(h("details", { open: true }, h("summary", { text: "Traceback" }), h("pre", { text: st.traceback })));
    if (st.log_tail) box.appendChild(h("details", null, h("summary", { text: "End of log (" + st.log_path + ")" }), h("pre", { text: st.log_tail })));
    return [h("h3", { text: st.state === "upstream failed" ? "Not run" : "Error" }), box];
  }

  function tokenizedTable(tok) {
    var rows = tok.splits.map(function (sp) {
      return h("tr", null, h("td", { text: sp.name }), h("td", { text: fmtCount(sp.documents) }),
               h("td", { text: fmtCount(sp.tokens) }), h("td", { text: fmtCount(sp.shards) }));
    });
    if (tok.splits.length > 1) {
      rows.push(h("tr", { "class": "total" }, h("td", { text: "total" }), h("td", { text: fmtCount(tok.totals.documents) }),
                  h("td", { text: fmtCount(tok.totals.tokens) }), h("td", { text: fmtCount(tok.totals.shards) })));
    }
    return [h("table", { "class": "stats", "data-role": "tokenized" },
              h("tr", null, h("th", { text: "split" }), h("th", { text: "documents" }), h("th", { text: "tokens" }), h("th", { text: "shards" })),
              rows),
            tok.vocab_size ? h("p", { "class": "hint", text: "vocabulary size " + fmtCount(tok.vocab_size) }) : null];
  }

  function memoryTable(mem) {
    var mesh = Object.keys(mem.mesh).map(function (k) { return k + "=" + mem.mesh[k]; }).join(" × ");
    function row(name, perDevice, total) {
      return h("tr", null, h("td", { text: name }), h("td", { "class": "num", text: fmtBytes(perDevice) }),
               h("td", { "class": "num", text: total === null ? "–" : fmtBytes(total) }));
    }
    return [h("table", { "class": "stats", "data-role": "memory" },
              h("tr", null, h("th", { text: "" }), h("th", { text: "per device" }), h("th", { text: "whole model" })),
              row("parameters", mem.params_bytes_per_device, mem.params_bytes_total),
              row("optimizer state", mem.opt_state_bytes_per_device, mem.opt_state_bytes_total),
              row("step temporaries (peak)", mem.temp_bytes_per_device, null)),
            h("p", { "class": "hint", text: "mesh " + mesh + "; measured at start from the arrays' shards and the compiled step" })];
  }

  // -- data curation: counts per filter, removed documents beside kept ones ----------------------
  function countsTable(counts) {
    return h("table", { "class": "kv", "data-role": "data-counts" }, Object.keys(counts).map(function (k) {
      var v = counts[k];
      return h("tr", null, h("th", { text: k.replace(/_/g, " ") }), h("td", { text: typeof v === "number" ? fmtNum(v) : String(v) }));
    }));
  }

  function filterNames(data) { return Object.keys(data.removed || {}); }

  function filterTable(data) {
    var total = data.counts.documents || 0;
    function share(n) { return total ? (100 * n / total).toFixed(1) + "%" : "–"; }
    var rows = filterNames(data).map(function (name, k) {
      var n = data.removed[name];
      return h("tr", { "data-filter": name },
        h("td", null, h("i", { "class": "swatch", style: "background:" + FILTER_COLORS[k % FILTER_COLORS.length] }), name),
        h("td", { text: fmtCount(n) }), h("td", { text: share(n) }), h("td", { text: data.edited[name] ? fmtCount(data.edited[name]) : "" }));
    });
    rows.push(h("tr", { "class": "total", "data-filter": "" }, h("td", { text: "kept" }), h("td", { text: fmtCount(data.counts.kept) }),
                h("td", { text: share(data.counts.kept) }), h("td")));
    return h("table", { "class": "stats", "data-role": "filters" },
      h("tr", null, h("th", { text: "filter (in order)" }), h("th", { text: "removed" }), h("th", { text: "of input" }), h("th", { text: "edited" })),
      rows);
  }

  function funnelBar(data) {
    var total = data.counts.documents || 0, bar = h("div", { "class": "funnel", "data-role": "funnel" });
    if (!total) return bar;
    filterNames(data).forEach(function (name, k) {
      var n = data.removed[name];
      if (n) bar.appendChild(h("span", { "class": "seg", title: name + ": " + fmtCount(n) + " removed",
        style: "width:" + (100 * n / total) + "%;background:" + FILTER_COLORS[k % FILTER_COLORS.length] }));
    });
    bar.appendChild(h("span", { "class": "seg kept", title: fmtCount(data.counts.kept) + " kept", style: "width:" + (100 * data.counts.kept / total) + "%" }));
    return bar;
  }

  // A snippet's words that its counterpart lacks, marked (what differs between near-duplicates).
  // Snippets are a text's head and tail joined by `cut`; each part is compared with the same part
  // of the other, and only where both cover it: a word near where a part was cut is never marked.
  function markedText(text, other, cut) {
    function norm(w) { return w.toLowerCase().replace(/[^\p{L}\p{N}]+/gu, ""); }
    function words(t) { return t.split(/\s+/).filter(function (w) { return w; }); }
    var parts = cut ? text.split(cut) : [text], others = other === undefined ? [] : cut ? other.split(cut) : [other], out = [];
    parts.forEach(function (part, p) {
      if (p) out.push(h("span", { "class": "cut", title: "text left out", text: cut }));
      var mine = other === undefined ? [] : parts.length === others.length ? words(others[p]) : words(other);
      var seen = {};
      mine.forEach(function (w) { seen[norm(w)] = true; });
      var count = words(part).length, k = 0, fromEnd = p > 0;
      part.split(/(\s+)/).forEach(function (w) {
        if (!w.trim()) { out.push(w); return; }
        var at = fromEnd ? count - 1 - k : k;
        k++;
        out.push(at < mine.length - 2 && !seen[norm(w)] ? h("mark", { text: w }) : w);
      });
    });
    return out;
  }

  function docCard(kind, label, id, snippet, why, other, cut) {
    return h("div", { "class": "doc " + kind, "data-role": kind },
      h("div", { "class": "doc-head" }, h("span", { "class": "doc-kind", text: label }), h("span", { "class": "mono", text: String(id) })),
      why ? h("div", { "class": "doc-why", text: why }) : null,
      h("p", { "class": "doc-text" }, snippet === null || snippet === undefined ? h("span", { "class": "hint", text: "(not found)" })
        : markedText(snippet, other === null ? undefined : other, cut)));
  }

  function examplePairs(data, name) {
    var kept = data.kept_examples || [];
    return (data.examples[name] || []).map(function (ex, k) {
      var right;
      if (ex.representative) {
        var rep = ex.representative;
        right = docCard("kept", "kept: representative", rep.id, rep.snippet, null, ex.snippet, data.snippet_cut);
        return h("div", { "class": "pair", "data-filter": name },
                 docCard("removed", "removed", ex.id, ex.snippet, ex.why, rep.snippet || "", data.snippet_cut), right);
      }
      var other = kept.length ? kept[k % kept.length] : null;
      right = other ? docCard("kept", "kept", other.id, other.snippet, (other.notes || {})[name] || null, undefined, data.snippet_cut)
                    : h("div", { "class": "doc kept hint", text: "no document was kept" });
      return h("div", { "class": "pair", "data-filter": name }, docCard("removed", "removed", ex.id, ex.snippet, ex.why, undefined, data.snippet_cut), right);
    });
  }

  function curationBlock(data) {
    var out = [funnelBar(data), filterTable(data)];
    filterNames(data).forEach(function (name) {
      if (!(data.examples[name] || []).length) return;
      out.push(h("h4", { text: name + ": " + fmtCount(data.removed[name]) + " removed" +
                               (data.examples[name].length < data.removed[name] ? " (" + data.examples[name].length + " shown)" : "") }));
      out.push(examplePairs(data, name));
    });
    return out;
  }

  function dataSummary(data) {
    var c = data.counts;
    if (data.step === "consolidate") {
      return fmtCount(c.documents) + " docs → " + fmtCount(c.kept) + " kept (" + (c.documents ? (100 * c.kept / c.documents).toFixed(1) : "–") + "%)";
    }
    var parts = [];
    ["documents", "duplicates", "contaminated", "pages"].forEach(function (k) { if (c[k] !== undefined) parts.push(fmtCount(c[k]) + " " + k); });
    if (c.mean_score !== undefined && c.mean_score !== null) parts.push("mean score " + fmtNum(c.mean_score));
    return parts.join(" · ");
  }

  function drawCuration() {
    var found = [];
    STEPS.forEach(function (st, i) { if (st.data && st.data.step === "consolidate") found.push(i); });
    if (!found.length) return;
    var list = document.getElementById("curation-list");
    found.forEach(function (i) {
      var st = STEPS[i];
      list.appendChild(h("div", { "class": "curation-item", "data-step": st.name },
        h("h3", null, stepButton(i), " ", badge(st.state), " ", h("span", { "class": "hint", text: dataSummary(st.data) })),
        curationBlock(st.data)));
    });
    document.getElementById("curation").hidden = false;
  }

  function stepButton(i) {
    return h("button", { "class": "link", type: "button", text: STEPS[i].name, onclick: function () { select(i, true); } });
  }

  function renderPanel(i) {
    var st = STEPS[i], panel = document.getElementById("panel");
    while (panel.firstChild) panel.removeChild(panel.firstChild);
    panel.setAttribute("data-step", st.name);
    append(panel, h("div", { "class": "panel-head" }, h("h2", { text: st.name }), badge(st.state)));
    append(panel, kvTable([
      ["hash", h("span", { "class": "mono", text: st.hash })],
      ["output", h("span", { "class": "mono", text: st.output_path })],
      ["function", st.fn ? h("span", { "class": "mono", text: st.fn }) : null],
      ["version", st.version],
      ["started", st.started_at ? fmtTime(st.started_at) : null],
      ["finished", st.finished_at ? fmtTime(st.finished_at) : null],
      ["duration", st.duration_s !== null ? fmtDuration(st.duration_s) : null],
      ["estimate", st.estimate_basis ? (st.estimate_s !== null ? fmtDuration(st.estimate_s) + " (" + st.estimate_basis + ")" : st.estimate_basis) : null],
      ["attempts", st.attempts],
      ["host", st.host],
      ["output size", st.output_bytes !== null ? fmtBytes(st.output_bytes) + (st.output_files !== null ? " in " + st.output_files + " files" : "") : null]
    ]));
    append(panel, reasonsBlock(st));
    append(panel, errorBlock(st));
    if (st.metrics) {
      append(panel, h("h3", { text: "Training (" + st.metrics.rows + " logged steps)" }));
      append(panel, trainingCharts(st));
    }
    if (st.memory) {
      append(panel, h("h3", { text: "Memory per device" }));
      append(panel, memoryTable(st.memory));
    }
    if (st.tokenized) {
      append(panel, h("h3", { text: "Tokenized data" }));
      append(panel, tokenizedTable(st.tokenized));
    }
    if (st.data) {
      append(panel, h("h3", { text: "Data (" + st.data.step.replace(/_/g, " ") + ")" }));
      append(panel, st.data.step === "consolidate" ? [funnelBar(st.data), filterTable(st.data)] : countsTable(st.data.counts));
    }
    append(panel, h("h3", { text: "Dependencies" }));
    if (st.deps.length) {
      append(panel, h("ul", { "class": "deps" }, st.deps.map(function (d) {
        return h("li", null, stepButton(d), " ", h("span", { "class": "mono hint", text: STEPS[d].short_hash }));
      })));
    } else append(panel, h("p", { "class": "hint", text: "none" }));
    var users = [];
    STEPS.forEach(function (o, k) { if (o.deps.indexOf(i) >= 0) users.push(k); });
    if (users.length) {
      append(panel, h("h3", { text: "Used by" }));
      append(panel, h("ul", { "class": "deps" }, users.map(function (u) { return h("li", null, stepButton(u)); })));
    }
    append(panel, h("h3", { text: "Config" }));
    append(panel, st.config === null ? h("p", { "class": "hint", text: "not recorded" }) : highlightJson(st.config));
    append(panel, h("h3", { text: "Environment" }));
    if (st.environment) append(panel, envTable(st.environment));
    else {
      append(panel, h("p", { "class": "hint", text: "Not built yet; the environment this report was made in:" }));
      if (DATA.environment) append(panel, envTable(DATA.environment));
    }
  }

  // keepGroups: show the step's provenance without opening its collapsed group (the first view).
  function select(i, scroll, keepGroups) {
    selected = i;
    var g = GROUPS[STEPS[i].group || 0];
    if (!g.open && !keepGroups) { g.open = true; redraw(); return; }
    Array.prototype.forEach.call(document.querySelectorAll(".node"), function (n) {
      n.classList.toggle("selected", Number(n.getAttribute("data-id")) === i);
    });
    Array.prototype.forEach.call(document.querySelectorAll(".edge"), function (e) {
      e.classList.toggle("hl", Number(e.getAttribute("data-from")) === i || Number(e.getAttribute("data-to")) === i);
    });
    Array.prototype.forEach.call(document.querySelectorAll("#steps-table tr[data-id]"), function (r) {
      r.classList.toggle("selected", Number(r.getAttribute("data-id")) === i);
    });
    renderPanel(i);
    if (scroll) {
      var panel = document.getElementById("panel");
      panel.scrollTop = 0;
      var rect = panel.getBoundingClientRect();
      if (rect.top < 0 || rect.top > window.innerHeight) panel.scrollIntoView({ block: "start" });
    }
  }

  // -- summary, training overview and the table -------------------------------------------------
  function drawSummary() {
    var box = document.getElementById("summary");
    STATE_ORDER.forEach(function (state) {
      var n = DATA.summary[state];
      if (n) box.appendChild(h("span", { "class": "badge s-" + stateKey(state), "data-state": state },
                                h("span", { "class": "dot" }), n + " " + state));
    });
  }

  function stepSummary(st) {
    if (st.metrics) {
      var last = st.metrics.series.loss, val = st.metrics.series.val_loss, parts = [];
      if (last && last.length) parts.push("loss " + fmtNum(last[last.length - 1][1]) + " @ step " + fmtNum(last[last.length - 1][0]));
      if (val && val.length) parts.push("val " + fmtNum(val[val.length - 1][1]));
      return parts.join(", ");
    }
    if (st.tokenized) {
      var t = st.tokenized.totals;
      return fmtCount(t.documents) + " docs · " + fmtCount(t.tokens) + " tokens · " + fmtCount(t.shards) + " shards";
    }
    if (st.data) return dataSummary(st.data);
    if (st.error) {
      var first = st.error.split("\n")[0];
      return first.length > 160 ? first.slice(0, 157) + "…" : first;
    }
    return "";
  }

  function drawTraining() {
    var trained = [];
    STEPS.forEach(function (st, i) { if (st.metrics) trained.push(i); });
    if (!trained.length) return;
    var list = document.getElementById("training-list");
    trained.forEach(function (i) {
      var st = STEPS[i];
      list.appendChild(h("div", { "class": "training-item", "data-step": st.name },
        h("h3", null, stepButton(i), " ", badge(st.state)), trainingCharts(st, ["loss", "lr", "tokens_per_s"])));
    });
    document.getElementById("training").hidden = false;
  }

  // -- compared runs: differing config fields, results, overlaid curves, evaluations ---------------
  var RUN_COLORS = ["#2f5fd0", "#e0662f", "#1f9d55", "#8a5cd6", "#b8860b", "#0f9fb5", "#d0417e", "#5d6d7e"];

  function drawCompare() {
    var cmp = DATA.comparison;
    if (!cmp || !cmp.rows.length) return;
    var byHash = {};
    STEPS.forEach(function (st, i) { byHash[st.hash] = i; });
    var curves = document.getElementById("compare-curves");
    [["loss", "Training loss"], ["val_loss", "Validation loss"]].forEach(function (pair) {
      var series = [];
      cmp.rows.forEach(function (row, k) {
        var st = STEPS[byHash[row.hash]];
        var pts = st && st.metrics && st.metrics.series[pair[0]];
        if (pts && pts.length) series.push({ key: row.label, label: row.label, points: pts, color: RUN_COLORS[k % RUN_COLORS.length] });
      });
      if (series.length) curves.appendChild(lineChart(pair[1], series, { key: "compare-" + pair[0] }));
    });
    var table = document.getElementById("compare-table");
    var order = cmp.rows.map(function (_, k) { return k; });
    var sortKey = null, descending = false;
    function cell(row, col) {
      if (col.kind === "field") return row.fields[col.name] || "";
      var v = row.metrics[col.name];
      return v === null || v === undefined ? "–" : fmtNum(v);
    }
    var cols = [{ kind: "step", name: "step" }]
      .concat(cmp.fields.map(function (f) { return { kind: "field", name: f }; }))
      .concat(cmp.metrics.map(function (m) { return { kind: "metric", name: m }; }));
    function render() {
      while (table.firstChild) table.removeChild(table.firstChild);
      table.appendChild(h("thead", null, h("tr", null, cols.map(function (col) {
        if (col.kind !== "metric") return h("th", { text: col.name, "class": col.kind === "field" ? "field" : null });
        var mark = sortKey === col.name ? (descending ? " ▼" : " ▲") : "";
        return h("th", { "class": "num sortable", "data-metric": col.name, title: "sort by " + col.name },
          h("button", { "class": "link", type: "button", text: col.name + mark, onclick: function () {
            descending = sortKey === col.name ? !descending : false;
            sortKey = col.name;
            order.sort(function (a, b) {
              var va = cmp.rows[a].metrics[col.name], vb = cmp.rows[b].metrics[col.name];
              if (va === null || va === undefined) return (vb === null || vb === undefined) ? a - b : 1;
              if (vb === null || vb === undefined) return -1;
              return descending ? vb - va : va - vb;
            });
            render();
          } }));
      }))));
      var body = h("tbody");
      order.forEach(function (k) {
        var row = cmp.rows[k], i = byHash[row.hash];
        body.appendChild(h("tr", { "data-run": row.label }, cols.map(function (col) {
          if (col.kind === "step") {
            return h("td", { "class": "name" }, h("i", { "class": "swatch", style: "background:" + RUN_COLORS[k % RUN_COLORS.length] }),
              i === undefined ? row.label : stepButton(i), " ", h("span", { "class": "mono", text: row.hash.slice(0, 8) }));
          }
          return h("td", { "class": col.kind === "metric" ? "num" : "mono", text: cell(row, col) });
        })));
      });
      table.appendChild(body);
    }
    render();
    if (cmp.eval_sets.length) {
      var evalTable = document.getElementById("eval-table");
      evalTable.appendChild(h("thead", null, h("tr", null, [h("th", { text: "model" })].concat(
        cmp.eval_sets.map(function (e) { return h("th", { "class": "num", text: e }); })))));
      var ebody = h("tbody");
      cmp.rows.forEach(function (row) {
        ebody.appendChild(h("tr", { "data-run": row.label }, [h("td", { "class": "name", text: row.label })].concat(
          cmp.eval_sets.map(function (e) {
            var bpb = row.metrics[e + ".bpb"], loss = row.metrics[e + ".loss"];
            return h("td", { "class": "num", "data-eval": e, text: bpb === null || bpb === undefined ? "–" : fmtNum(bpb),
                             title: loss === null || loss === undefined ? null : "loss " + fmtNum(loss) });
          }))));
      });
      evalTable.appendChild(ebody);
      document.getElementById("evals").hidden = false;
    }
    document.getElementById("compare").hidden = false;
  }

  // -- compared runs: benchmark task scores, a row per task metric, a column per run ------------
  // (Runs are few and task metrics many: rows keep the table inside its card.)
  function drawTaskScores() {
    var cmp = DATA.comparison;
    if (!cmp || !cmp.rows.length || !cmp.task_metrics || !cmp.task_metrics.length) return;
    // Column names are "<task>.<metric>" with a task from cmp.tasks (which may itself hold dots).
    var metrics = cmp.task_metrics.map(function (name) {
      var task = cmp.tasks.filter(function (t) { return name.indexOf(t + ".") === 0; })
        .sort(function (a, b) { return b.length - a.length; })[0] || name.split(".")[0];
      return { name: name, task: task, metric: name.slice(task.length + 1) };
    });
    var table = document.getElementById("task-table");
    table.appendChild(h("thead", null, h("tr", null, [h("th", { text: "task" }), h("th", { text: "metric" })]
      .concat(cmp.rows.map(function (row, k) {
        return h("th", { "class": "num run", "data-run": row.label, title: row.label },
          h("i", { "class": "swatch", style: "background:" + RUN_COLORS[k % RUN_COLORS.length] }), row.name,
          h("span", { "class": "mono hash", text: " " + row.hash.slice(0, 8) }));
      })))));
    var body = h("tbody");
    metrics.forEach(function (m, i) {
      var values = cmp.rows.map(function (row) { return row.metrics[m.name]; });
      var present = values.filter(function (v) { return v !== null && v !== undefined; });
      var better = (cmp.higher_is_better || {})[m.name];  // undefined: the task does not say
      var best = present.length < 2 || better === undefined ? null
        : better ? Math.max.apply(null, present) : Math.min.apply(null, present);
      var first = i === 0 || metrics[i - 1].task !== m.task;
      var span = metrics.filter(function (o) { return o.task === m.task; }).length;
      body.appendChild(h("tr", { "data-metric": m.name, "class": first ? "task-start" : null },
        first ? h("td", { "class": "name task", rowspan: span, text: m.task }) : null,
        h("td", { "class": "mono", text: m.metric + (better === false ? " ↓" : better ? " ↑" : "") }),
        cmp.rows.map(function (row, k) {
          var v = values[k], err = (row.stderr || {})[m.name];
          var missing = v === null || v === undefined;
          return h("td", { "class": "num" + (!missing && v === best ? " best" : ""), "data-run": row.label },
            missing ? "–" : fmtNum(v), missing || err === undefined ? null : h("span", { "class": "err", text: " ± " + fmtNum(err) }));
        })));
    });
    table.appendChild(body);
    document.getElementById("task-scores").hidden = false;
  }

  function stepRow(st, i) {
    var why = st.reasons.length ? st.reasons.join("; ") : st.state === "cached" ? "cached" : "";
    return h("tr", { "data-id": i, "data-name": st.name, "data-state": st.state, "class": i === selected ? "selected" : null },
      h("td", { "class": "name" }, stepButton(i)),
      h("td", null, badge(st.state)),
      h("td", { "class": "mono", text: st.short_hash }),
      h("td", { "class": "num", title: st.estimate_basis || "", text: st.estimate_s !== null ? fmtDuration(st.estimate_s) : st.estimate_basis ? "none" : "" }),
      h("td", { "class": "num", text: fmtDuration(st.duration_s) }),
      h("td", { "class": "num", text: fmtBytes(st.output_bytes) }),
      h("td", { text: stepSummary(st) }),
      h("td", { text: why }));
  }

  function drawTable() {
    var table = document.getElementById("steps-table");
    while (table.firstChild) table.removeChild(table.firstChild);
    table.appendChild(h("thead", null, h("tr", null, ["step", "state", "hash", "estimate", "duration", "output size", "details", "why"]
      .map(function (c) { return h("th", { text: c }); }))));
    var body = h("tbody");
    // A group's rows stay together under its header, which stands where its first step is; the
    // groups (and single steps) follow one another in the order of their first steps.
    var rows = [];
    GROUPS.forEach(function (g, gi) {
      if (g.members.length > 1) {
        rows.push([g.members[0], -1, h("tr", { "class": "group-row", "data-group": g.name, "data-open": String(g.open) },
          h("td", { colspan: 8 }, h("button", { "class": "link", type: "button", "aria-expanded": String(g.open),
            text: (g.open ? "▾ " : "▸ ") + groupLabel(g) + " (" + g.members.length + " steps)",
            onclick: function () { setGroupOpen(gi, !g.open); } }), " ", h("span", { "class": "hint", text: countsText(groupCounts(g)) })))]);
      }
      var at = g.members.length > 1 ? g.members[0] : null;
      if (g.open) g.members.forEach(function (i) { rows.push([at === null ? i : at, i, stepRow(STEPS[i], i)]); });
    });
    rows.sort(function (a, b) { return a[0] - b[0] || a[1] - b[1]; });
    rows.forEach(function (r) { body.appendChild(r[2]); });
    table.appendChild(body);
  }

  function redraw() {
    drawGraph();
    drawTable();
    if (selected >= 0) select(selected, false, true);
  }

  function initialSelection() {
    var order = ["failed", "interrupted", "running", "upstream failed"];
    for (var k = 0; k < order.length; k++) {
      for (var i = 0; i < STEPS.length; i++) if (STEPS[i].state === order[k]) return i;
    }
    for (var j = 0; j < STEPS.length; j++) if (STEPS[j].metrics) return j;
    return STEPS.length - 1;
  }

  drawSummary();
  drawGraph();
  drawTraining();
  drawCuration();
  drawCompare();
  drawTaskScores();
  drawTable();
  if (STEPS.length) select(initialSelection(), false, true);
  document.body.setAttribute("data-ready-ms", String(Math.round(performance.now())));
  document.body.setAttribute("data-ready", "true");
})();
