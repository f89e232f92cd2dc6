// What the calculator page (calculator.js) and the pages' small calculators
// (calculator-widget.js) share: one Pyodide runtime per page, with the trainmath wheel built
// from the same source as the pages, loaded from this site (never a CDN) the first time either
// asks for it, and the service worker that keeps them working offline.
let started = null;

// Python with trainmath importable: started once, whoever asks first; `step(n, text)` hears
// its progress (1: Python, 2: the library, 3: trainmath's first import).
export function loadTrainmath(root, step = () => {}) {
  if (!started) started = boot(root, step);
  return started;
}

async function boot(root, step) {
  const base = new URL(root.dataset.pyodide, location.href).href;
  step(1, "Loading Python in your browser…");
  const { loadPyodide } = await import(base + "pyodide.mjs");
  const py = await loadPyodide({ indexURL: base });
  step(2, "Loading the trainmath library…");
  const wheel = await fetch(new URL(root.dataset.wheel, location.href));
  if (!wheel.ok) throw new Error(`the trainmath wheel: HTTP ${wheel.status}`);
  py.unpackArchive(await wheel.arrayBuffer(), "wheel");
  step(3, "Starting trainmath…");
  py.pyimport("trainmath.cli.calculator").working_directory("/home/pyodide/calculator");
  return py;
}

// The service worker (calculator-sw.js, at the site's root) for the pages under `scope`.
export function keepOffline(root, scope) {
  if ("serviceWorker" in navigator && location.protocol.startsWith("http")) {
    navigator.serviceWorker.register(new URL(root.dataset.worker, location.href), { scope })
      .catch(() => {});
  }
}
