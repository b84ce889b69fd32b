// Site search from disk. The search runs in a Web Worker, and a page opened as file:// cannot start
// one (Chromium refuses a worker script from a file:// URL), so the search box would stay at
// "Initializing search". On such a page this replaces Worker with one that runs the worker's script
// in a hidden frame of the page itself: the frame's postMessage hands messages back to the page, and
// the page's messages arrive as "message" events on the frame's window, as they would in a worker.
// mkdocs-material's offline plugin would add a shim from unpkg.com for this; this file stands in for
// it (the plugin adds its own only when no polyfill is named iframe-worker), so nothing is fetched
// from the network. Served over http(s), the browser's Worker is left as it is.
(function () {
  "use strict";
  if (location.protocol !== "file:") {
    return;
  }

  class FrameWorker extends EventTarget {
    constructor(url) {
      super();
      this.onmessage = null;
      this.onerror = null;
      // Messages posted before the script has run wait here (null once it has run).
      this.pending = [];
      this.frame = document.createElement("iframe");
      this.frame.hidden = true;
      this.frame.title = "search worker";
      // An empty frame shares the page's origin, so the page can reach into its window.
      (document.body || document.documentElement).appendChild(this.frame);
      const scope = this.frame.contentWindow;
      scope.postMessage = (data) => this.emit(new MessageEvent("message", { data: data }));
      scope.importScripts = () => {
        throw new Error("importScripts is not available to a search worker opened from disk");
      };
      const script = scope.document.createElement("script");
      script.src = new URL(url, location.href).href;
      script.onload = () => {
        const pending = this.pending;
        this.pending = null;
        pending.forEach((data) => this.deliver(data));
      };
      script.onerror = () => this.emit(new ErrorEvent("error", { message: `cannot load ${script.src}` }));
      scope.document.head.appendChild(script);
    }

    emit(event) {
      this.dispatchEvent(event);
      const handler = event.type === "message" ? this.onmessage : this.onerror;
      if (typeof handler === "function") {
        handler.call(this, event);
      }
    }

    deliver(data) {
      const scope = this.frame.contentWindow;
      scope.dispatchEvent(new scope.MessageEvent("message", { data: data }));
    }

    postMessage(data) {
      if (this.pending) {
        this.pending.push(data);
      } else {
        this.deliver(data);
      }
    }

    terminate() {
      this.frame.remove();
    }
  }

  window.Worker = FrameWorker;
})();
