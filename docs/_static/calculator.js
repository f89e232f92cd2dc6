// The calculator page (docs/calculator.md): moves the form's values into the trainmath command,
// run by Pyodide in this page, and its results out. No arithmetic here: trainmath.cli.calculator
// (Python) builds the command line, runs `trainmath <command> --json` and draws the result.
const root = document.getElementById("tm-calculator");

if (root) {
  const statusBox = root.querySelector(".tm-calc-status");
  const progress = statusBox.querySelector("progress");
  const statusText = statusBox.querySelector(".tm-calc-status-text");
  const panels = [...root.querySelectorAll(".tm-calc-panel")];
  let calc = null;  // trainmath.cli.calculator.calculate, once Python is up
  // milliseconds since navigation: Python up, trainmath imported, first result; the last run's
  const timings = { python: null, library: null, first: null, last: null };
  root.tmTimings = timings;

  function step(value, text) {
    progress.value = value;
    statusText.textContent = text;
  }

  // -- the URL: #cmd=estimate&model=llama-3-8b&dp=8 reproduces a result -------------------------
  function valuesOf(form) {
    const pairs = [];
    for (const [name, value] of new FormData(form)) {
      if (typeof value === "string" && value.trim() !== "") pairs.push([name, value]);
    }
    return pairs;
  }

  function setValues(form, pairs) {
    for (const el of form.elements) {
      if (!el.name) continue;
      if (el.type === "checkbox") el.checked = false;
      else el.value = "";
    }
    for (const [name, value] of pairs) {
      const el = form.elements.namedItem(name);
      if (!el) continue;
      if (el.type === "checkbox") el.checked = value === "on";
      else el.value = value;
    }
  }

  function panelOf(command) {
    return panels.find((p) => p.dataset.command === command) || panels[0];
  }

  function fromHash() {
    const params = new URLSearchParams(location.hash.slice(1));
    if (!params.has("cmd")) return null;  // not the inputs: an anchor in the page
    const command = params.get("cmd") || panels[0].dataset.command;
    params.delete("cmd");
    return { command, pairs: [...params] };
  }

  function toHash(command, pairs) {
    const params = new URLSearchParams([["cmd", command], ...pairs]);
    history.replaceState(null, "", "#" + params.toString());
  }

  // -- tabs (one per subcommand, when the command has several) -----------------------------------
  const tabs = [...root.querySelectorAll('[role="tab"]')];
  function select(command) {
    for (const p of panels) p.hidden = p.dataset.command !== command;
    for (const t of tabs) {
      const on = t.getAttribute("aria-controls") === "tm-calc-panel-" + command;
      t.setAttribute("aria-selected", String(on));
      t.tabIndex = on ? 0 : -1;
    }
  }
  tabs.forEach((tab, i) => {
    tab.addEventListener("click", () => {
      const command = panels[i].dataset.command;
      select(command);
      run(panels[i]);
    });
    tab.addEventListener("keydown", (e) => {
      const d = e.key === "ArrowRight" ? 1 : e.key === "ArrowLeft" ? -1 : 0;
      if (!d) return;
      const next = tabs[(i + d + tabs.length) % tabs.length];
      next.focus();
      next.click();
    });
  });

  // -- running the command -------------------------------------------------------------------------
  function showError(panel, field, message) {
    for (const el of panel.querySelectorAll(".tm-calc-error")) el.textContent = "";
    for (const el of panel.querySelectorAll("[aria-invalid]")) el.removeAttribute("aria-invalid");
    if (!message) return;
    let box = panel.querySelector(`.tm-calc-error[data-error-for="${CSS.escape(field || "")}"]`);
    if (!box) box = panel.querySelector('.tm-calc-error[data-error-for=""]');
    box.textContent = message;
    const input = field && panel.querySelector(".tm-calc-form").elements.namedItem(field);
    if (input && input.setAttribute) input.setAttribute("aria-invalid", "true");
  }

  function run(panel) {
    if (!calc) return;
    const form = panel.querySelector(".tm-calc-form");
    const command = panel.dataset.command;
    const pairs = valuesOf(form);
    toHash(command, pairs);
    const started = performance.now();
    const out = JSON.parse(calc(command, JSON.stringify(pairs)));
    const result = panel.querySelector(".tm-calc-result");
    showError(panel, out.field, out.status ? out.stderr.trim() : "");
    result.dataset.status = String(out.status);
    result.querySelector(".tm-calc-cmd").textContent = out.command_line || "";
    result.querySelector(".tm-calc-json").textContent = out.stdout;
    result.querySelector(".tm-calc-html").innerHTML = out.html;
    const summary = panel.querySelector(".tm-calc-summary");
    if (summary) {  // the line Python wrote, kept in view while the form is edited
      summary.querySelector(".tm-calc-summary-text").textContent =
        out.status === 0 ? out.summary : out.stderr.trim();
      summary.classList.toggle("tm-calc-summary-error", out.status !== 0);
      summary.hidden = !(out.status === 0 ? out.summary : out.stderr.trim());
    }
    result.classList.toggle("tm-calc-stale", out.status !== 0);
    const ms = performance.now() - started;
    timings.last = ms;
    if (timings.first === null) timings.first = performance.now();
    result.dataset.ms = ms.toFixed(1);
    result.dataset.runs = String(Number(result.dataset.runs || 0) + 1);
  }

  // the summary bar steps aside while its result is on screen (it is fixed on phones)
  if ("IntersectionObserver" in window) {
    const seen = new IntersectionObserver((entries) => {
      for (const e of entries) {
        const bar = e.target.closest(".tm-calc-panel").querySelector(".tm-calc-summary");
        if (bar) bar.classList.toggle("tm-calc-summary-off", e.isIntersecting);
      }
    });
    for (const panel of panels) seen.observe(panel.querySelector(".tm-calc-result"));
  }

  for (const panel of panels) {
    const form = panel.querySelector(".tm-calc-form");
    let timer = 0;
    form.addEventListener("submit", (e) => { e.preventDefault(); run(panel); });
    form.addEventListener("input", () => { clearTimeout(timer); timer = setTimeout(() => run(panel), 150); });
    form.addEventListener("change", () => { clearTimeout(timer); run(panel); });
  }
  window.addEventListener("hashchange", () => {
    const state = fromHash();
    if (!state) return;
    const panel = panelOf(state.command);
    const form = panel.querySelector(".tm-calc-form");
    if (JSON.stringify(valuesOf(form)) === JSON.stringify(state.pairs)) return;
    setValues(form, state.pairs);
    select(panel.dataset.command);
    run(panel);
  });

  // -- Python: after the page is usable (calculator-runtime.js, shared with the small calculators) -
  async function boot() {
    const { loadTrainmath, keepOffline } = await import("./calculator-runtime.js");
    keepOffline(root, "./calculator");
    const py = await loadTrainmath(root, (n, text) => {
      if (n === 2) timings.python = performance.now();
      step(n, text);
    });
    if (timings.python === null) timings.python = performance.now();
    calc = py.pyimport("trainmath.cli.calculator").calculate;
    timings.library = performance.now();
    step(4, "Ready: results update as you type.");
    statusBox.classList.add("tm-calc-ready");
    for (const b of root.querySelectorAll("button[type=submit]")) b.disabled = false;
    const state = fromHash();
    if (state) {
      const panel = panelOf(state.command);
      setValues(panel.querySelector(".tm-calc-form"), state.pairs);
      select(panel.dataset.command);
      run(panel);
    } else {
      run(panels[0]);
    }
    root.dataset.ready = "true";
  }

  function start() {
    boot().catch((e) => {
      step(0, "The calculator could not start: " + e.message);
      root.dataset.ready = "failed";
    });
  }
  if (document.readyState === "complete") start();
  else window.addEventListener("load", start);
}
