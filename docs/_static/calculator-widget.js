// The pages' small calculators (the {calculator-widget} directive, docs/_ext/trainmath_calculator.py):
// a few fields of `trainmath estimate` and a chart of its result. The page arrives with the
// chart of the preset's example, drawn at build time; Python starts only when the reader
// scrolls to a small calculator or touches it, in the runtime the calculator page uses
// (calculator-runtime.js), and trainmath.cli.widget computes every figure. No arithmetic here.
const widgets = [...document.querySelectorAll(".tm-calc-widget")];

if (widgets.length) {
  let module = null;  // a promise of trainmath.cli.widget, once one small calculator asks
  let scrolled = false;  // the reader has scrolled since the page loaded
  const visible = new Set();
  const starters = [];

  function widgetModule(root) {
    if (!module) {
      module = import("./calculator-runtime.js").then(({ loadTrainmath, keepOffline }) => {
        if (!document.getElementById("tm-calculator")) {  // the calculator page keeps its own
          keepOffline(root);
        }
        return loadTrainmath(root);
      }).then((runtime) => ({
        calculate: (preset, values) => runtime.call("trainmath.cli.widget", "calculate", preset, values),
      }));
    }
    return module;
  }

  function setUp(root) {
    const form = root.querySelector(".tm-w-form");
    const fieldset = form.querySelector("fieldset");
    const result = root.querySelector(".tm-w-result");
    const status = root.querySelector(".tm-w-status");
    const open = root.querySelector(".tm-w-open a");
    const fixed = JSON.parse(root.dataset.fixed || "[]");
    let calc = null;
    let starting = null;
    let wanted = false;  // a change waits for Python

    fieldset.disabled = false;
    status.textContent = "";

    function values() {
      const pairs = [];
      for (const el of form.elements) {
        if (el.name) pairs.push([el.name, el.value]);
      }
      return [...pairs, ...fixed];
    }

    function showError(field, message) {
      for (const el of root.querySelectorAll(".tm-calc-error")) el.textContent = "";
      for (const el of root.querySelectorAll("[aria-invalid]")) el.removeAttribute("aria-invalid");
      if (!message) return;
      let box = root.querySelector(`.tm-calc-error[data-error-for="${CSS.escape(field || "")}"]`);
      if (!box) box = root.querySelector('.tm-calc-error[data-error-for=""]');
      box.textContent = message;
      const input = field && form.elements.namedItem(field);
      if (input && input.setAttribute) input.setAttribute("aria-invalid", "true");
    }

    let running = false, again = false;
    async function run() {
      if (!calc) { wanted = true; start(); return; }
      if (running) { again = true; return; }
      running = true;
      const started = performance.now();
      let out;
      try {
        out = JSON.parse(await calc(root.dataset.preset, JSON.stringify(values())));
      } catch (e) {  // Python failed or was restarted: no figures for these inputs
        out = { status: 1, field: null, link: "", stderr: "The small calculator could not compute this ("
                + e.message.trim().split("\n").pop() + "); the calculator page has every option." };
      } finally {
        running = false;
      }
      showError(out.field, out.status ? out.stderr.trim() : "");
      result.dataset.status = String(out.status);
      result.classList.toggle("tm-calc-stale", out.status !== 0);
      if (out.status === 0) {
        result.querySelector(".tm-w-summary strong").textContent = out.summary;
        result.querySelector(".tm-w-chart").innerHTML = out.chart;
        result.querySelector(".tm-w-cmd").textContent = out.command_line;
      }
      if (out.link) open.setAttribute("href", root.dataset.calculator + "#" + out.link);
      root.tmLast = out;
      root.dataset.ms = (performance.now() - started).toFixed(1);
      root.dataset.runs = String(Number(root.dataset.runs || 0) + 1);
      if (again) { again = false; run(); }
    }

    function start() {
      if (starting) return starting;
      root.dataset.ready = "loading";
      status.textContent = "Loading Python in your browser (once, then from the cache)…";
      starting = widgetModule(root).then((m) => {
        calc = m.calculate;
        status.textContent = "";
        root.dataset.ready = "true";
        if (wanted) run();
      }, (e) => {
        status.textContent = "The small calculator could not start: " + e.message
          + ". The calculator page has every option.";
        root.dataset.ready = "failed";
      });
      return starting;
    }
    starters.push([root, start]);

    let timer = 0;
    form.addEventListener("submit", (e) => { e.preventDefault(); run(); });
    form.addEventListener("input", () => { clearTimeout(timer); timer = setTimeout(run, 150); });
    form.addEventListener("change", () => { clearTimeout(timer); run(); });
    for (const kind of ["pointerdown", "focusin"]) root.addEventListener(kind, start, { once: true });
  }

  for (const root of widgets) setUp(root);

  // Scrolled into view: start Python, so that it is ready when the reader changes a field. A
  // small calculator on the page's first screen waits for the reader to scroll or touch it.
  function startVisible() {
    for (const [root, start] of starters) if (visible.has(root)) start();
  }
  if ("IntersectionObserver" in window) {
    const seen = new IntersectionObserver((entries) => {
      for (const e of entries) {
        if (e.isIntersecting) visible.add(e.target); else visible.delete(e.target);
      }
      if (scrolled) startVisible();
    }, { threshold: 0.25 });
    for (const root of widgets) seen.observe(root);
  }
  const onScroll = () => {
    scrolled = true;
    window.removeEventListener("scroll", onScroll);
    startVisible();
  };
  function listen() { window.addEventListener("scroll", onScroll, { passive: true }); }
  if (document.readyState === "complete") listen();
  else window.addEventListener("load", listen);
}
