// What the calculator page (calculator.js) and the pages' small calculators
// (calculator-widget.js) share: one Python per page, run in a Web Worker
// (calculator-worker.js: Pyodide and the trainmath wheel built from the same source as the
// pages, loaded from this site, never a CDN), started the first time either asks for it; and
// the service worker that keeps them for offline use when the reader asks for it.
let shared = null;

// The runtime: `call(module, fn, ...args)` runs a trainmath function in the worker and
// resolves to what it returns; `cancel()` ends the worker (and whatever it was computing) and
// starts a new one. `ready` resolves once Python is up; `step(n, text)` hears its progress
// (1: Python, 2: the library, 3: trainmath's first import).
export function loadTrainmath(root, step = () => {}) {
  if (!shared) shared = new Runtime(root);
  shared.listen(step);
  return shared.ready.then(() => shared);
}

class Cancelled extends Error {
  constructor() { super("cancelled"); this.name = "Cancelled"; }
}

class Runtime {
  constructor(root) {
    this.urls = {
      runner: new URL(root.dataset.runner, location.href).href,
      pyodide: new URL(root.dataset.pyodide, location.href).href,
      wheel: new URL(root.dataset.wheel, location.href).href,
    };
    this.steps = [];
    this.start();
  }

  listen(step) { this.steps.push(step); }

  start() {
    this.pending = new Map();
    this.next = 0;
    this.worker = new Worker(this.urls.runner, { type: "module" });
    this.worker.addEventListener("message", ({ data }) => {
      if (data.kind === "step") { for (const s of this.steps) s(data.n, data.text); return; }
      const job = this.pending.get(data.id);
      if (!job) return;
      this.pending.delete(data.id);
      if (data.ok) job.resolve(data.value);
      else {
        job.reject(new Error(data.error));
        if (data.fatal) this.restart();  // Python cannot go on: a new one, for the next run
      }
    });
    this.worker.addEventListener("error", (e) => {
      e.preventDefault();
      this.fail(new Error(e.message || "Python stopped"));
      this.restart();
    });
    this.ready = this.send({ kind: "boot", pyodide: this.urls.pyodide, wheel: this.urls.wheel });
    this.ready.catch(() => {});
  }

  send(message) {
    const id = ++this.next;
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      this.worker.postMessage({ ...message, id });
    });
  }

  fail(error) {
    for (const job of this.pending.values()) job.reject(error);
    this.pending.clear();
  }

  // Whatever is running is dropped (its promise rejects with a Cancelled error).
  restart() {
    this.worker.terminate();
    this.fail(new Cancelled());
    this.start();
    return this.ready;
  }

  cancel() { return this.restart(); }

  async call(module, fn, ...args) {
    await this.ready;
    return this.send({ kind: "call", module, fn, args });
  }
}

// The service worker (calculator-sw.js, at the site's root), for the whole site (its scope
// must hold calculator-worker.js, whose own requests it then answers), only when the reader has
// asked to keep the calculator offline (localStorage "tm-offline"): then every page read is kept.
// When they have not, a worker registered before is removed with its caches.
export function keepOffline(root) {
  if (!("serviceWorker" in navigator) || !location.protocol.startsWith("http")) return;
  const url = new URL(root.dataset.worker, location.href);
  if (localStorage.getItem("tm-offline") === "yes") {
    navigator.serviceWorker.register(url, { scope: new URL(".", url).href }).catch(() => {});
  } else {
    navigator.serviceWorker.getRegistrations().then(async (all) => {
      for (const r of all) {
        if (r.active && r.active.scriptURL === url.href) await r.unregister();
      }
      if (all.length && "caches" in window) {
        for (const key of await caches.keys()) if (key.startsWith("trainmath-")) await caches.delete(key);
      }
    }).catch(() => {});
  }
}
