// The step graph: steps in layers (longest path from the sources), laid out to fit its panel,
// with zoom and pan; big graphs collapsed by name prefix (one node per folder) until opened.

  // -- which steps hide in a collapsed folder ---------------------------------------------------
  // Folders (name prefixes) with more steps than this start collapsed, and the deepest folders
  // are collapsed further until the graph shows at most MAX_ITEMS nodes.
  var GROUP_OPEN_MAX = 8, MAX_ITEMS = 36;

  function folderOf(name) { var k = name.lastIndexOf("/"); return k < 0 ? "" : name.slice(0, k); }

  function ancestors(folder) {
    if (!folder) return [];
    var parts = folder.split("/"), out = [];
    for (var k = 1; k <= parts.length; k++) out.push(parts.slice(0, k).join("/"));
    return out;
  }

  function FolderTree(steps) {
    var self = this;
    this.steps = steps;
    this.collapsed = {};
    this.under = {};  // folder -> step indexes anywhere below it
    steps.forEach(function (st, i) {
      ancestors(folderOf(st.name)).forEach(function (f) { (self.under[f] = self.under[f] || []).push(i); });
    });
    var direct = {};
    steps.forEach(function (st) { var f = folderOf(st.name); direct[f] = (direct[f] || 0) + 1; });
    Object.keys(direct).forEach(function (f) { if (f && direct[f] > GROUP_OPEN_MAX) self.collapsed[f] = true; });
    var folders = Object.keys(this.under).sort(function (a, b) {
      return (b.split("/").length - a.split("/").length) || (a < b ? -1 : 1);
    });
    for (var k = 0; k < folders.length && this.itemCount() > MAX_ITEMS; k++) {
      var f = folders[k];
      if (!this.isClosed(f) && this.visibleUnder(f) > 1) this.collapsed[f] = true;
    }
  }

  // True when ``folder`` or a folder above it is collapsed.
  FolderTree.prototype.isClosed = function (folder) {
    var self = this;
    return ancestors(folder).some(function (f) { return self.collapsed[f]; });
  };

  // The collapsed folder a step hides in (the outermost), or null when it is shown.
  FolderTree.prototype.hiddenBy = function (i) {
    var chain = ancestors(folderOf(this.steps[i].name));
    for (var k = 0; k < chain.length; k++) if (this.collapsed[chain[k]]) return chain[k];
    return null;
  };

  FolderTree.prototype.visibleUnder = function (folder) {
    var self = this, seen = {};
    this.under[folder].forEach(function (i) { seen[self.hiddenBy(i) || "#" + i] = true; });
    return Object.keys(seen).length;
  };

  FolderTree.prototype.itemCount = function () {
    var self = this, seen = {};
    this.steps.forEach(function (_, i) { seen[self.hiddenBy(i) || "#" + i] = true; });
    return Object.keys(seen).length;
  };

  // Show step i: open every folder above it.
  FolderTree.prototype.reveal = function (i) {
    var self = this;
    ancestors(folderOf(this.steps[i].name)).forEach(function (f) { delete self.collapsed[f]; });
  };

  // -- layers, ordered by barycentres ------------------------------------------------------------
  function layered(items) {
    var n = items.length, i, j;
    var children = items.map(function () { return []; });
    var indeg = items.map(function (it) { return it.deps.length; });
    items.forEach(function (it, k) { it.deps.forEach(function (d) { children[d].push(k); }); });
    var layer = new Array(n).fill(0), queue = [], order = [], seen = new Array(n).fill(false);
    for (i = 0; i < n; i++) if (indeg[i] === 0) queue.push(i);
    for (var head = 0; head < queue.length || order.length < n; head++) {
      if (head >= queue.length) {
        // Collapsed folders can make a cycle (a -> B -> a2): place its first unplaced member anyway.
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
    layers = layers.filter(function (l) { return l && l.length; });
    var pos = new Array(n).fill(0);
    layers.forEach(function (l) { l.forEach(function (v, k) { pos[v] = k; }); });
    function bary(v, nbrs) {
      if (!nbrs.length) return pos[v];
      var sum = 0;
      nbrs.forEach(function (u) { sum += pos[u]; });
      return sum / nbrs.length;
    }
    for (var sweep = 0; sweep < 6; sweep++) {
      var down = sweep % 2 === 0;
      for (j = down ? 1 : layers.length - 2; down ? j < layers.length : j >= 0; j += down ? 1 : -1) {
        var keys = {};
        layers[j].forEach(function (v) { keys[v] = bary(v, down ? items[v].deps : children[v]); });
        layers[j].sort(function (a, b) { return keys[a] - keys[b] || a - b; });
        layers[j].forEach(function (v, k) { pos[v] = k; });
      }
    }
    return layers;
  }

  // -- node labels, whole: wrapped at "/", "-", "_" and "." to the node's width -------------------
  var NODE_W = 212, GAP_X = 48, GAP_Y = 14, LAYER_GAP = 38, PAD = 16, LINE_H = 15;
  var LABEL_FONT = "600 13px system-ui, -apple-system, 'Segoe UI', Roboto, 'DejaVu Sans', sans-serif";
  var measureCtx = null;

  function textWidth(text) {
    if (!measureCtx) { measureCtx = document.createElement("canvas").getContext("2d"); measureCtx.font = LABEL_FONT; }
    return measureCtx.measureText(text).width;
  }

  // Lines of at most ``width`` pixels: broken after a "/" where one fits, else after "-", "_" or
  // ".", else anywhere.
  function wrapLabel(text, width) {
    var lines = [], line = "";
    function place(piece, finer) {
      if (textWidth(line + piece) <= width) { line += piece; return; }
      if (line && textWidth(piece) <= width) { lines.push(line); line = piece; return; }
      if (finer) { piece.split(/(?<=[\-_.])/).forEach(function (p) { place(p, false); }); return; }
      for (var k = 0; k < piece.length; k++) {
        if (line && textWidth(line + piece[k]) > width) { lines.push(line); line = ""; }
        line += piece[k];
      }
    }
    text.split(/(?<=\/)/).forEach(function (p) { place(p, true); });
    if (line) lines.push(line);
    return lines;
  }

  function nodeHeight(lines) { return 34 + lines.length * LINE_H; }

  // -- placing the layers: across (a column per layer) or down (rows, a layer wrapped to the width) -
  function placeAcross(layers, sizes) {
    var colH = layers.map(function (l) { return l.reduce(function (a, v) { return a + sizes[v]; }, 0) + (l.length - 1) * GAP_Y; });
    var tallest = Math.max.apply(null, colH), xy = [];
    layers.forEach(function (l, c) {
      var y = PAD + (tallest - colH[c]) / 2;
      l.forEach(function (v) { xy[v] = [PAD + c * (NODE_W + GAP_X), y]; y += sizes[v] + GAP_Y; });
    });
    return { xy: xy, w: 2 * PAD + layers.length * NODE_W + (layers.length - 1) * GAP_X, h: 2 * PAD + tallest, dir: "across" };
  }

  function placeDown(layers, sizes, perRow) {
    var widest = Math.min(perRow, Math.max.apply(null, layers.map(function (l) { return l.length; })));
    var w = 2 * PAD + widest * NODE_W + (widest - 1) * GAP_X, y = PAD, xy = [];
    layers.forEach(function (l, c) {
      for (var r = 0; r < l.length; r += perRow) {
        var row = l.slice(r, r + perRow), rowW = row.length * NODE_W + (row.length - 1) * GAP_X;
        var rowH = Math.max.apply(null, row.map(function (v) { return sizes[v]; }));
        row.forEach(function (v, k) { xy[v] = [(w - rowW) / 2 + k * (NODE_W + GAP_X), y]; });
        y += rowH + (r + perRow < l.length ? GAP_Y : LAYER_GAP);
      }
      if (c === layers.length - 1) y -= LAYER_GAP;
    });
    return { xy: xy, w: w, h: y + PAD, dir: "down" };
  }

  function fitScale(place, room, tallest) { return Math.min(1, room / place.w, tallest / place.h); }

  // The placement drawn at the largest scale that fits ``room`` x ``tallest``: across, or down with
  // the number of nodes per row that does best (the most, of those that do equally well).
  function bestPlacement(layers, sizes, room, tallest) {
    var best = placeAcross(layers, sizes), bestScale = fitScale(best, room, tallest);
    var widest = Math.max.apply(null, layers.map(function (l) { return l.length; }));
    for (var perRow = widest; perRow >= 1; perRow--) {
      var down = placeDown(layers, sizes, perRow), scale = fitScale(down, room, tallest);
      if (scale > bestScale + 1e-6) { best = down; bestScale = scale; }
    }
    return best;
  }

  // -- drawing ------------------------------------------------------------------------------------
  function edgePath(dir, a, ha, b, hb) {
    if (dir === "across") {
      var x1 = a[0] + NODE_W, y1 = a[1] + ha / 2, x2 = b[0], y2 = b[1] + hb / 2, c = Math.max(24, (x2 - x1) / 2);
      return "M" + x1 + "," + y1 + " C" + (x1 + c) + "," + y1 + " " + (x2 - c) + "," + y2 + " " + x2 + "," + y2;
    }
    var u1 = a[0] + NODE_W / 2, v1 = a[1] + ha, u2 = b[0] + NODE_W / 2, v2 = b[1], d = Math.max(18, (v2 - v1) / 2);
    return "M" + u1 + "," + v1 + " C" + u1 + "," + (v1 + d) + " " + u2 + "," + (v2 - d) + " " + u2 + "," + v2;
  }

  function labelText(lines, cls) {
    return s("text", { "class": cls, x: 15, y: 19 }, lines.map(function (line, k) {
      return s("tspan", { x: 15, dy: k ? LINE_H : 0, text: line });
    }));
  }

  // Draw ``items`` ({label, sub, title, cls, attrs, deps, onopen}) into ``box``, laid out to fit it;
  // returns the view (fit, zoom) so the caller's buttons can drive it.
  function drawGraphInto(box, items) {
    while (box.firstChild) box.removeChild(box.firstChild);
    var room = Math.max(240, box.clientWidth - 2), tallest = Math.max(280, Math.round(window.innerHeight * 0.75));
    var lines = items.map(function (it) { return wrapLabel(it.label, NODE_W - 24); });
    var sizes = lines.map(nodeHeight);
    var layers = layered(items);
    var place = bestPlacement(layers, sizes, room, tallest);
    var scale = fitScale(place, room, tallest);
    var height = Math.max(140, Math.min(tallest, Math.ceil(place.h * scale) + 2));
    var svg = s("svg", { width: "100%", height: height, role: "img", "aria-label": "step graph", id: "graph-svg" });
    svg.appendChild(s("defs", null, s("marker", { id: "arrow", viewBox: "0 0 10 10", refX: 9, refY: 5,
      markerWidth: 9, markerHeight: 9, markerUnits: "userSpaceOnUse", orient: "auto-start-reverse" },
      s("path", { d: "M0,0 L10,5 L0,10 z", fill: "#9aa5b4" }))));
    var view = s("g", { "class": "viewport" });
    var edges = s("g", { "class": "edges" });
    items.forEach(function (it, v) {
      it.deps.forEach(function (d) {
        edges.appendChild(s("path", { "class": "edge", "data-from": items[d].ref, "data-to": it.ref, "marker-end": "url(#arrow)",
                                      d: edgePath(place.dir, place.xy[d], sizes[d], place.xy[v], sizes[v]) }));
      });
    });
    view.appendChild(edges);
    var nodes = s("g", { "class": "nodes" });
    items.forEach(function (it, v) {
      var hgt = sizes[v], activate = it.onopen;
      var attrs = { "class": it.cls, tabindex: 0, role: "button", transform: "translate(" + place.xy[v][0] + "," + place.xy[v][1] + ")",
                    onclick: function () { if (!box.dragged) activate(); },
                    onkeydown: function (e) { if (e.key === "Enter" || e.key === " ") { e.preventDefault(); activate(); } } };
      Object.keys(it.attrs).forEach(function (k) { attrs[k] = it.attrs[k]; });
      nodes.appendChild(s("g", attrs, s("title", { text: it.title }),
        s("rect", { "class": "box", width: NODE_W, height: hgt, rx: 7, ry: 7 }),
        it.stacked ? s("rect", { "class": "box stack", x: 4, y: 4, width: NODE_W - 8, height: hgt - 8, rx: 5, ry: 5 }) : null,
        s("rect", { "class": "stripe", x: 0, y: 0, width: 6, height: hgt, rx: 3 }),
        labelText(lines[v], "label"),
        s("text", { "class": "sub" + (it.mono ? " mono" : ""), x: 15, y: 19 + (lines[v].length - 1) * LINE_H + 18, text: it.sub })));
    });
    view.appendChild(nodes);
    svg.appendChild(view);
    box.appendChild(svg);
    box.style.height = height + "px";
    box.setAttribute("data-layout", place.dir);
    return panZoom(box, svg, view, place, room, height);
  }

  // -- zoom and pan: a transform on the viewport group; fit() puts the whole graph in view ---------
  function panZoom(box, svg, view, place, room, height) {
    var k = 1, tx = 0, ty = 0;
    function apply() {
      view.setAttribute("transform", "translate(" + tx.toFixed(1) + "," + ty.toFixed(1) + ") scale(" + k.toFixed(4) + ")");
      box.setAttribute("data-scale", k.toFixed(3));
    }
    function fit() {
      k = fitScale(place, room, height - 2);
      tx = (room - place.w * k) / 2;
      ty = (height - place.h * k) / 2;
      apply();
    }
    function zoomAt(factor, cx, cy) {
      var nk = Math.max(0.08, Math.min(3, k * factor));
      tx = cx - (cx - tx) * nk / k;
      ty = cy - (cy - ty) * nk / k;
      k = nk;
      apply();
    }
    svg.addEventListener("wheel", function (e) {
      if (!e.ctrlKey && !e.metaKey) return;  // a plain wheel scrolls the page
      e.preventDefault();
      var r = svg.getBoundingClientRect();
      zoomAt(Math.exp(-e.deltaY * 0.002), e.clientX - r.left, e.clientY - r.top);
    }, { passive: false });
    var drag = null;
    svg.addEventListener("pointerdown", function (e) {
      if (e.button !== 0) return;
      drag = { x: e.clientX, y: e.clientY, tx: tx, ty: ty, moved: false };
      box.dragged = false;
    });
    svg.addEventListener("pointermove", function (e) {
      if (!drag) return;
      var dx = e.clientX - drag.x, dy = e.clientY - drag.y;
      if (!drag.moved && Math.abs(dx) + Math.abs(dy) < 5) return;
      if (!drag.moved) { drag.moved = true; svg.setPointerCapture(e.pointerId); box.classList.add("panning"); }
      tx = drag.tx + dx; ty = drag.ty + dy;
      box.dragged = true;
      apply();
    });
    function end() { drag = null; box.classList.remove("panning"); setTimeout(function () { box.dragged = false; }, 0); }
    svg.addEventListener("pointerup", end);
    svg.addEventListener("pointercancel", end);
    fit();
    return { fit: fit, zoom: function (factor) { zoomAt(factor, room / 2, height / 2); } };
  }
