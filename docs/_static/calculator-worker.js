// Python for the calculator page and the small calculators (calculator-runtime.js starts it):
// Pyodide and the trainmath wheel in a Web Worker, so that the page stays responsive while the
// library computes, and a run can be stopped by ending the worker. It does no arithmetic: each
// message names a function of trainmath and its arguments, and the answer is its return value.
let py = null;

async function boot({ pyodide, wheel }) {
  step(1, "Loading Python in your browser…");
  const { loadPyodide } = await import(pyodide + "pyodide.mjs");
  py = await loadPyodide({ indexURL: pyodide });
  step(2, "Loading the trainmath library…");
  const response = await fetch(wheel);
  if (!response.ok) throw new Error(`the trainmath wheel: HTTP ${response.status}`);
  py.unpackArchive(await response.arrayBuffer(), "wheel");
  step(3, "Starting trainmath…");
  py.pyimport("trainmath.cli.calculator").working_directory("/home/pyodide/calculator");
}

function step(n, text) { self.postMessage({ kind: "step", n, text }); }

self.addEventListener("message", async ({ data }) => {
  const { id } = data;
  try {
    if (data.kind === "boot") {
      await boot(data);
      self.postMessage({ id, ok: true });
    } else {
      const fn = py.pyimport(data.module)[data.fn];
      self.postMessage({ id, ok: true, value: fn(...data.args) });
    }
  } catch (e) {
    // a Python exception, or Python itself broken (a stack overflow): the page restarts it
    self.postMessage({ id, ok: false, error: String((e && e.message) || e), fatal: !py || !!(e && e.name !== "PythonError") });
  }
});
