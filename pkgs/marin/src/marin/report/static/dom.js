// marin pages' shared helpers: DOM and SVG builders, number and time formats, state badges.
// Concatenated with the other scripts of a page inside one function (see marin.report.render).
  var SVGNS = "http://www.w3.org/2000/svg";
  var STATE_ORDER = ["failed", "upstream failed", "interrupted", "running", "would run", "ran", "cached", "unneeded"];

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
