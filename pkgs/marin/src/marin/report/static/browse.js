// marin browse: one step's page. Its views (tabs) fetch what they show from the server's JSON API
// (marin.report.browse.server); nothing is written anywhere. Runs after dom.js and charts.js.
  var STEP = JSON.parse(document.getElementById("browse-step").textContent);
  var VIEW = document.getElementById("view");

  function api(name, params) {
    var q = Object.keys(params).filter(function (k) { return params[k] !== null && params[k] !== undefined && params[k] !== ""; })
      .map(function (k) { return encodeURIComponent(k) + "=" + encodeURIComponent(params[k]); }).join("&");
    return fetch("api/" + name + "?" + q).then(function (r) {
      return r.json().then(function (body) {
        if (!r.ok) throw new Error(body.error || r.status + " " + r.statusText);
        return body;
      });
    });
  }

  function failed(box) {
    return function (e) {
      while (box.firstChild) box.removeChild(box.firstChild);
      box.appendChild(h("p", { "class": "error-box", "data-role": "error", text: String(e.message || e) }));
      done();
    };
  }

  function clear(node) { while (node.firstChild) node.removeChild(node.firstChild); return node; }

  // The page is drawn when a view has what it fetched (the tests wait for this).
  function done() { document.body.setAttribute("data-ready", "true"); }
  function busy() { document.body.setAttribute("data-ready", "false"); }

  function stepLink(output, label) { return h("a", { href: "step?ref=" + encodeURIComponent(output), text: label || output }); }

  // A text with the pieces a diff marked (``[[piece, differs], ...]``) in <mark>.
  function segments(parts) {
    return parts.map(function (p) { return p[1] ? h("mark", { text: p[0] }) : p[0]; });
  }

  function textBlock(t, parts) {
    return h("div", { "class": "doc-body" }, h("p", { "class": "doc-text" }, parts ? segments(parts) : t.text),
      t.cut ? h("p", { "class": "hint", text: "… " + fmtCount(t.chars) + " characters in all" }) : null);
  }

  function fieldsTable(fields) {
    var keys = Object.keys(fields || {});
    if (!keys.length) return null;
    return h("table", { "class": "kv fields" }, keys.map(function (k) {
      var v = fields[k], text = typeof v === "string" ? v : JSON.stringify(v);
      return h("tr", null, h("th", { text: k }), h("td", { "class": "mono", text: text.length > 300 ? text.slice(0, 299) + "…" : text }));
    }));
  }

  function pager(page, more, go) {
    return h("div", { "class": "pager" },
      h("button", { type: "button", "data-page": "prev", disabled: page === 0, text: "← previous", onclick: function () { go(page - 1); } }),
      h("span", { "class": "hint", text: "page " + (page + 1) }),
      h("button", { type: "button", "data-page": "next", disabled: !more, text: "next →", onclick: function () { go(page + 1); } }));
  }

  // -- documents, page by page ------------------------------------------------------------------
  function documentsView(box) {
    var files = STEP.data_files;
    if (!files.length) { box.appendChild(h("p", { "class": "hint", text: "This step wrote no records." })); return done(); }
    // Every file, each folder holding several, or one file.
    var folders = {};
    files.forEach(function (f) { var k = f.lastIndexOf("/"); if (k > 0) folders[f.slice(0, k)] = (folders[f.slice(0, k)] || 0) + 1; });
    var choices = [["", "all " + files.length + " files"]]
      .concat(Object.keys(folders).filter(function (d) { return folders[d] > 1; }).map(function (d) { return [d, d + "/ (" + folders[d] + " files)"]; }))
      .concat(files.length > 1 ? files.map(function (f) { return [f, f]; }) : []);
    var select = h("select", { id: "file", onchange: function () { show(0); } },
      choices.map(function (c) { return h("option", { value: c[0], text: c[1] }); }));
    var list = h("div", { "class": "records" });
    box.appendChild(h("div", { "class": "toolbar" }, h("label", { "for": "file", text: "file " }), select));
    box.appendChild(list);
    function show(page) {
      busy();
      api("records", { ref: STEP.output, file: select.value, page: page, per: 20 }).then(function (data) {
        clear(list);
        list.appendChild(pager(page, data.more, show));
        if (data.total !== null) list.appendChild(h("p", { "class": "hint", text: fmtCount(data.total) + " records" }));
        data.records.forEach(function (r) {
          list.appendChild(h("article", { "class": "record doc", "data-id": r.id === null || r.id === undefined ? null : String(r.id), "data-index": r.index },
            h("div", { "class": "doc-head" }, h("span", { "class": "doc-kind", text: "#" + r.index }),
              h("span", { "class": "hint", text: r.file + ":" + (r.line + 1) }),
              r.id !== null && r.id !== undefined ? h("span", { "class": "mono", text: String(r.id) }) : null,
              r.tokens !== undefined ? h("span", { "class": "hint", text: r.tokens + " tokens" }) : null),
            r.text !== undefined ? textBlock(r) : null, fieldsTable(r.fields)));
        });
        if (!data.records.length) list.appendChild(h("p", { "class": "hint", text: "No records on this page." }));
        done();
      }).catch(failed(list));
    }
    show(0);
  }

  // -- histograms ---------------------------------------------------------------------------------
  function barChart(name, hist) {
    var W = 420, H = 150, M = { l: 44, r: 8, t: 8, b: 30 };
    var bars = hist.kind === "numbers" ? hist.bins.map(function (b) { return [b[2], fmtNum(b[0]) + "–" + fmtNum(b[1])]; })
                                       : hist.counts.map(function (c) { return [c[1], c[0]]; });
    if (hist.others) bars.push([hist.others, "others"]);
    var top = Math.max.apply(null, bars.map(function (b) { return b[0]; })) || 1;
    var svg = s("svg", { viewBox: "0 0 " + W + " " + H, "class": "hist-svg" });
    var bw = (W - M.l - M.r) / bars.length;
    bars.forEach(function (b, k) {
      var bh = (H - M.t - M.b) * b[0] / top;
      svg.appendChild(s("rect", { "class": "bar", x: M.l + k * bw + 1, y: H - M.b - bh, width: Math.max(1, bw - 2), height: bh },
        s("title", { text: b[1] + ": " + fmtCount(b[0]) })));
    });
    svg.appendChild(s("line", { x1: M.l, x2: W - M.r, y1: H - M.b, y2: H - M.b, "class": "axis-line" }));
    svg.appendChild(s("text", { x: M.l - 4, y: M.t + 9, "text-anchor": "end", text: fmtCount(top) }));
    if (hist.kind === "numbers") {
      svg.appendChild(s("text", { x: M.l, y: H - 12, text: fmtNum(hist.min) }));
      svg.appendChild(s("text", { x: W - M.r, y: H - 12, "text-anchor": "end", text: fmtNum(hist.max) }));
    } else {
      bars.forEach(function (b, k) {
        if (bars.length <= 12) svg.appendChild(s("text", { x: M.l + (k + 0.5) * bw, y: H - 12, "text-anchor": "middle", text: String(b[1]).slice(0, 10) }));
      });
    }
    var note = hist.kind === "numbers" ? fmtCount(hist.count) + " values, mean " + fmtNum(hist.mean)
                                       : fmtCount(hist.count) + " values, " + fmtCount(hist.distinct) + " distinct";
    return h("figure", { "class": "hist chart", "data-name": name, "data-kind": hist.kind },
      h("figcaption", { "class": "chart-title" }, h("span", { text: name }), h("span", { "class": "hint", text: note })), svg);
  }

  function statsView(box) {
    busy();
    api("stats", { ref: STEP.output }).then(function (data) {
      box.appendChild(h("p", { "class": "hint", text: fmtCount(data.records) + " records" + (data.more ? " (the first ones)" : "") }));
      var grid = h("div", { "class": "charts" });
      Object.keys(data.histograms).forEach(function (name) { grid.appendChild(barChart(name, data.histograms[name])); });
      box.appendChild(grid);
      if (!Object.keys(data.histograms).length) box.appendChild(h("p", { "class": "hint", text: "Nothing to count." }));
      done();
    }).catch(failed(box));
  }

  // -- duplicate clusters -------------------------------------------------------------------------
  function clustersView(box) {
    var list = h("div", { "class": "cluster-list" }), detail = h("div", { "class": "cluster-detail" });
    box.appendChild(h("div", { "class": "split" }, list, detail));
    busy();
    api("clusters", { ref: STEP.output }).then(function (data) {
      list.appendChild(h("p", { "class": "hint", text: fmtCount(data.count) + " clusters with duplicates" }));
      list.appendChild(h("ul", null, data.clusters.map(function (c) {
        return h("li", null, h("button", { "class": "link", type: "button", "data-cluster": c.cluster,
          text: c.size + " documents · kept " + c.representative, onclick: function () { openCluster(c.cluster); } }));
      })));
      if (data.clusters.length) openCluster(data.clusters[0].cluster); else done();
    }).catch(failed(list));
    function openCluster(key) {
      busy();
      api("cluster", { ref: STEP.output, cluster: key }).then(function (c) {
        clear(detail).setAttribute("data-cluster", key);
        detail.appendChild(h("article", { "class": "doc kept", "data-role": "representative", "data-id": String(c.representative.id) },
          h("div", { "class": "doc-head" }, h("span", { "class": "doc-kind", text: "kept: representative" }), h("span", { "class": "mono", text: String(c.representative.id) })),
          textBlock(c.representative, c.representative.segments)));
        c.members.forEach(function (m) {
          detail.appendChild(h("article", { "class": "doc removed", "data-role": "member", "data-id": String(m.id) },
            h("div", { "class": "doc-head" }, h("span", { "class": "doc-kind", text: m.duplicate ? "duplicate" : "member" }),
              h("span", { "class": "mono", text: String(m.id) }),
              m.jaccard !== null && m.jaccard !== undefined ? h("span", { "class": "hint", text: "Jaccard " + fmtNum(m.jaccard) + " to the representative" }) : null),
            textBlock(m, m.segments)));
        });
        done();
      }).catch(failed(detail));
    }
  }

  // -- two steps side by side ---------------------------------------------------------------------
  var JOIN_KINDS = { same: "the same", differ: "texts differ", a: "only here", b: "only there" };

  function compareView(box) {
    var other = h("select", { id: "other", onchange: function () { show(0); } });
    var only = "all", table = h("div", { "class": "join" });
    var filters = h("span", { "class": "filters" }, [["all", "all"], ["differ", "texts differ"], ["a", "only here"], ["b", "only there"]].map(function (f) {
      return h("button", { type: "button", "data-only": f[0], "class": f[0] === only ? "on" : null, text: f[1],
                           onclick: function () { only = f[0]; show(0); } });
    }));
    box.appendChild(h("div", { "class": "toolbar" }, h("label", { "for": "other", text: "beside " }), other, filters));
    box.appendChild(table);
    busy();
    api("steps", {}).then(function (data) {
      var seen = {};
      STEP.compare_with.concat(data.steps).forEach(function (o) {
        if (o === STEP.output || seen[o]) return;
        seen[o] = true;
        other.appendChild(h("option", { value: o, text: o + (STEP.compare_with.indexOf(o) >= 0 ? " (suggested)" : "") }));
      });
      if (other.options.length) show(0); else { table.appendChild(h("p", { "class": "hint", text: "No other step to compare with." })); done(); }
    }).catch(failed(table));
    function show(page) {
      Array.prototype.forEach.call(filters.children, function (b) { b.classList.toggle("on", b.getAttribute("data-only") === only); });
      busy();
      api("join", { a: STEP.output, b: other.value, only: only, page: page }).then(function (data) {
        clear(table);
        var c = data.counts;
        table.appendChild(h("p", { "class": "hint", "data-role": "counts",
          text: fmtCount(c.same) + " the same · " + fmtCount(c.differ) + " differ · " + fmtCount(c.a) + " only here · " + fmtCount(c.b) + " only in " + data.b }));
        table.appendChild(pager(page, data.more, show));
        table.appendChild(h("div", { "class": "pair head" }, h("div", { text: data.a }), h("div", { text: data.b })));
        data.rows.forEach(function (r) {
          function side(t) { return t ? h("div", { "class": "doc" }, textBlock(t, t.segments)) : h("div", { "class": "doc missing hint", text: "(not there)" }); }
          table.appendChild(h("div", { "class": "joined", "data-id": String(r.id), "data-kind": r.kind },
            h("div", { "class": "mono join-id", text: String(r.id) + " · " + JOIN_KINDS[r.kind] }), h("div", { "class": "pair" }, side(r.a), side(r.b))));
        });
        done();
      }).catch(failed(table));
    }
  }

  // -- training: curves and samples ---------------------------------------------------------------
  function curvesView(box, samples) {
    busy();
    api("training", { ref: STEP.output }).then(function (data) {
      if (!samples) {
        if (data.metrics) box.appendChild(metricCurves(data.metrics));
        else box.appendChild(h("p", { "class": "hint", text: "No metrics logged." }));
        return done();
      }
      if (!data.evaluations.length) box.appendChild(h("p", { "class": "hint", text: "No evaluation of this model wrote samples." }));
      data.evaluations.forEach(function (ev) {
        box.appendChild(h("h3", null, ev.task + " · ", stepLink(ev.output, ev.step)));
        ev.samples.forEach(function (sm) {
          var scores = Object.keys(sm.scores).map(function (k) { return k + " " + fmtNum(sm.scores[k]); }).join(" · ");
          box.appendChild(h("article", { "class": "doc sample", "data-task": ev.task },
            h("div", { "class": "doc-head" }, h("span", { "class": "doc-kind", text: "doc " + sm.doc_id }), h("span", { "class": "hint", text: scores })),
            h("p", { "class": "doc-text", text: sm.prompt.text + (sm.prompt.cut ? " …" : "") }),
            sm.choices ? h("ol", { "class": "choices" }, sm.choices.map(function (ch) {
              return h("li", { "class": (ch.picked ? "picked " : "") + (ch.target ? "target" : "") },
                ch.text, h("span", { "class": "hint", text: " log-likelihood " + fmtNum(ch.loglik) + (ch.picked ? " · the model's pick" : "") + (ch.target ? " · the answer" : "") }));
            })) : h("p", null, h("b", { text: "answer: " }), sm.response || "", h("span", { "class": "hint", text: " (target " + sm.target + ")" }))));
        });
      });
      done();
    }).catch(failed(box));
  }

  function filesView(box) {
    box.appendChild(h("table", { "class": "steps files" }, h("thead", null, h("tr", null, h("th", { text: "file" }), h("th", { "class": "num", text: "size" }))),
      h("tbody", null, STEP.files.map(function (f) { return h("tr", null, h("td", { "class": "mono", text: f.path }), h("td", { "class": "num", text: fmtBytes(f.size) })); }))));
    if (STEP.deps.length) {
      box.appendChild(h("h3", { text: "Made from" }));
      box.appendChild(h("ul", null, STEP.deps.map(function (d) { return h("li", null, stepLink(d.output, d.name)); })));
    }
    done();
  }

  // -- tabs ---------------------------------------------------------------------------------------
  var isDedup = STEP.kind === "attributes" && /dedup/.test(STEP.fn || "");
  var VIEWS = {
    documents: ["documents", documentsView], stats: ["histograms", statsView], clusters: ["duplicate clusters", clustersView],
    compare: ["side by side", compareView], curves: ["curves", function (b) { curvesView(b, false); }],
    samples: ["samples", function (b) { curvesView(b, true); }], files: ["files", filesView]
  };
  var TABS = { documents: ["documents", "stats", "compare", "files"], attributes: ["documents", "stats"].concat(isDedup ? ["clusters"] : []).concat(["files"]),
               tokenized: ["documents", "stats", "files"], training: ["curves", "samples", "files"], records: ["documents", "files"], files: ["files"] }[STEP.kind];

  function openTab(name) {
    if (TABS.indexOf(name) < 0) name = TABS[0];
    Array.prototype.forEach.call(document.querySelectorAll("#tabs a"), function (a) { a.classList.toggle("on", a.getAttribute("data-view") === name); });
    clear(VIEW).setAttribute("data-view", name);
    VIEWS[name][1](VIEW);
  }

  var nav = document.getElementById("tabs");
  TABS.forEach(function (name) { nav.appendChild(h("a", { href: "#" + name, "data-view": name, text: VIEWS[name][0] })); });
  window.addEventListener("hashchange", function () { openTab(location.hash.slice(1)); });
  openTab(location.hash.slice(1));
