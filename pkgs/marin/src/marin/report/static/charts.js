// Line charts of a training step's metrics, in the groups the page's data names
// (marin.report.curves: losses, optimiser, throughput, each evaluation task).
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
      if (opts.legend !== false) legend.appendChild(h("span", null, h("i", { style: "background:" + sr.color }), sr.label));
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


  var SERIES_COLORS = { loss: "#2f5fd0", val_loss: "#e0662f", lr: "#1f9d55", tokens_per_s: "#8a5cd6",
                        grad_norm: "#b8860b", mfu: "#0f9fb5" };
  var PALETTE = ["#2f5fd0", "#e0662f", "#1f9d55", "#8a5cd6", "#b8860b", "#0f9fb5", "#d0417e", "#5d6d7e"];

  // Every curve of a step's metrics (``{series, groups}``), a heading per group; the values a
  // step logged once are listed under their group.
  function metricCurves(metrics) {
    var wrap = h("div", { "class": "curve-groups" });
    (metrics.groups || []).forEach(function (group) {
      var charts = h("div", { "class": "charts" });
      group.charts.forEach(function (chart) {
        var series = [];
        chart.series.forEach(function (sr, k) {
          var pts = metrics.series[sr.key];
          if (pts && pts.length) series.push({ key: sr.key, label: sr.label, points: pts,
                                               color: SERIES_COLORS[sr.key] || PALETTE[k % PALETTE.length] });
        });
        // A chart of one series named as its title needs no legend.
        var legend = series.length > 1 || series.length && series[0].label.toLowerCase() !== chart.title.toLowerCase();
        if (series.length) charts.appendChild(lineChart(chart.title, series, { key: chart.key, legend: legend }));
      });
      var once = group.once.length ? h("table", { "class": "kv once", "data-role": "logged-once" }, group.once.map(function (o) {
        var p = metrics.series[o.key][0];
        return h("tr", { "data-series": o.key }, h("th", { text: o.label }), h("td", { text: fmtNum(p[1]) + " (step " + fmtNum(p[0]) + ")" }));
      })) : null;
      wrap.appendChild(h("div", { "class": "curve-group", "data-group": group.key },
        h("h4", { text: group.title }), group.charts.length ? charts : null, once));
    });
    return wrap;
  }
