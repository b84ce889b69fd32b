// marin report: draws the step graph, the provenance panel, the training charts and the steps
// table from the JSON embedded in the page. No libraries, no network: plain DOM and SVG.
// (Runs after dom.js, charts.js and graph.js, inside the same function: see marin.report.render.)
  var DATA = JSON.parse(document.getElementById("report-data").textContent);
  var STEPS = DATA.steps;
  var selected = -1;
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
  // The table's groups: steps by their name's folder (a header row each when it holds several).
  var GROUPS = (DATA.groups || [""]).map(function (name) { return { name: name, members: [] }; });
  STEPS.forEach(function (st, i) { GROUPS[st.group || 0].members.push(i); });
  var TREE = new FolderTree(STEPS);
  // Served by `marin browse`: each finished step links to its page there.
  var BROWSE = document.getElementById("browse-data") ? JSON.parse(document.getElementById("browse-data").textContent) : null;

  function browseLink(st) {
    if (!BROWSE || (st.state !== "cached" && st.state !== "ran")) return null;
    var output = st.output_path.slice(DATA.prefix.replace(/\/+$/, "").length + 1);
    return h("p", { "class": "browse-link" }, h("a", { href: BROWSE.step + encodeURIComponent(output), "data-role": "browse",
      text: "Browse its data →" }));
  }

  // -- the graph: a node per step shown, one per collapsed folder --------------------------------
  function folderCounts(folder) {
    var counts = {};
    TREE.under[folder].forEach(function (i) { counts[STEPS[i].state] = (counts[STEPS[i].state] || 0) + 1; });
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

  function folderLabel(folder) { return folder === "" ? "(top level)" : folder + "/"; }

  function stepItem(i) {
    var st = STEPS[i];
    return { ref: i, label: st.name, sub: st.short_hash + " · " + st.state, mono: true, deps: [],
             title: st.name + " (" + st.state + ")\n" + st.hash, cls: "node n-" + stateKey(st.state),
             attrs: { "data-id": i, "data-name": st.name, "data-state": st.state, "data-hash": st.short_hash },
             onopen: function () { select(i, true); } };
  }

  function folderItem(folder) {
    var counts = folderCounts(folder), n = TREE.under[folder].length, text = countsText(counts);
    return { ref: "g:" + folder, label: folderLabel(folder) + " ×" + n, deps: [], stacked: true,
             sub: text.length > 32 ? text.slice(0, 31) + "…" : text,
             title: folderLabel(folder) + ": " + n + " steps (" + text + "); click to open",
             cls: "group n-" + stateKey(worstState(counts)), attrs: { "data-group": folder, "data-count": n },
             onopen: function () { delete TREE.collapsed[folder]; redraw(); } };
  }

  // What the graph shows: every step not inside a collapsed folder, one node per collapsed folder.
  function graphItems() {
    var items = [], itemOf = new Array(STEPS.length), ofFolder = {};
    STEPS.forEach(function (st, i) {
      var folder = TREE.hiddenBy(i);
      if (folder === null) { itemOf[i] = items.length; items.push(stepItem(i)); return; }
      if (ofFolder[folder] === undefined) { ofFolder[folder] = items.length; items.push(folderItem(folder)); }
      itemOf[i] = ofFolder[folder];
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

  var graphView = null;

  function drawGraph() {
    var box = document.getElementById("graph");
    if (!STEPS.length) {
      while (box.firstChild) box.removeChild(box.firstChild);
      box.appendChild(h("p", { "class": "hint", text: "No steps." }));
      return;
    }
    graphView = drawGraphInto(box, graphItems());
  }

  Array.prototype.forEach.call(document.querySelectorAll("[data-zoom]"), function (button) {
    button.addEventListener("click", function () {
      if (!graphView) return;
      var how = button.getAttribute("data-zoom");
      if (how === "fit") graphView.fit(); else graphView.zoom(how === "in" ? 1.25 : 0.8);
    });
  });

  var resizeTimer = null, drawnWidth = window.innerWidth;
  window.addEventListener("resize", function () {
    clearTimeout(resizeTimer);
    resizeTimer = setTimeout(function () {
      if (window.innerWidth === drawnWidth) return;
      drawnWidth = window.innerWidth;
      redraw();
    }, 120);
  });

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
    append(panel, browseLink(st));
    append(panel, reasonsBlock(st));
    append(panel, errorBlock(st));
    if (st.metrics) {
      append(panel, h("h3", { text: "Training (" + st.metrics.rows + " logged steps)" }));
      append(panel, metricCurves(st.metrics));
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
    if (TREE.hiddenBy(i) !== null && !keepGroups) { TREE.reveal(i); redraw(); return; }
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
        h("h3", null, stepButton(i), " ", badge(st.state)), metricCurves(st.metrics)));
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
      h("td", { "class": "clip", title: stepSummary(st) || null, text: stepSummary(st) }),
      h("td", { "class": "clip", title: why || null, text: why }));
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
    GROUPS.forEach(function (g) {
      var open = !TREE.isClosed(g.name);
      if (g.members.length > 1) {
        var counts = {};
        g.members.forEach(function (i) { counts[STEPS[i].state] = (counts[STEPS[i].state] || 0) + 1; });
        rows.push([g.members[0], -1, h("tr", { "class": "group-row", "data-group": g.name, "data-open": String(open) },
          h("td", { colspan: 8 }, h("button", { "class": "link", type: "button", "aria-expanded": String(open),
            text: (open ? "▾ " : "▸ ") + folderLabel(g.name) + " (" + g.members.length + " steps)",
            onclick: function () {
              if (open) TREE.collapsed[g.name] = true; else TREE.reveal(g.members[0]);
              redraw();
            } }), " ", h("span", { "class": "hint", text: countsText(counts) })))]);
      }
      var at = g.members.length > 1 ? g.members[0] : null;
      if (open) g.members.forEach(function (i) { rows.push([at === null ? i : at, i, stepRow(STEPS[i], i)]); });
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
  // Without a section beside it, the details panel takes the whole width.
  var beside = document.querySelectorAll("#columns > section:not([hidden])").length;
  document.getElementById("columns").classList.toggle("solo", beside === 0);
  if (STEPS.length) select(initialSelection(), false, true);
  document.body.setAttribute("data-ready-ms", String(Math.round(performance.now())));
  document.body.setAttribute("data-ready", "true");
