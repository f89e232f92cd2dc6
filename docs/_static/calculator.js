// The calculator page (docs/calculator.md): moves the form's values into the trainmath command,
// run by Pyodide in a Web Worker (calculator-runtime.js), and its results out. No arithmetic
// here: trainmath.cli.calculator (Python) builds the command line, runs `trainmath <command>
// --json` and draws the result. The page stays responsive while it runs; a run over 300 ms
// shows its progress and a Cancel, which ends the worker; any failure clears the last result.
const root = document.getElementById("tm-calculator");
const SLOW_MS = 300;  // a run longer than this shows that it is running, and can be cancelled

if (root) {
  const statusBox = root.querySelector(".tm-calc-status");
  const progress = statusBox.querySelector("progress");
  const statusText = statusBox.querySelector(".tm-calc-status-text");
  const panels = [...root.querySelectorAll(".tm-calc-panel")];
  let runtime = null;  // the worker, once Python is up
  // milliseconds since navigation: Python up, trainmath imported, first result; the last run's
  const timings = { python: null, library: null, first: null, last: null };
  root.tmTimings = timings;

  function step(value, text) {
    progress.value = value;
    statusText.textContent = text;
  }

  // -- the URL: #cmd=estimate&model=llama-3-8b&dp=8 reproduces a result -------------------------
  // A pasted file (config.json, a log) stays out of it unless the reader ticks "share"; which
  // groups are open is in it, as `open=training,extras`.
  function valuesOf(form) {
    const pairs = [];
    for (const [name, value] of new FormData(form)) {
      if (typeof value === "string" && value.trim() !== "") pairs.push([name, value]);
    }
    return pairs;
  }

  function linkPairs(form) {
    const share = form.querySelector(".tm-calc-share-config");
    const keep = share && share.checked;
    const pairs = valuesOf(form).filter(([name]) => {
      const el = form.elements.namedItem(name);
      return keep || !(el && el.dataset && el.dataset.private);
    });
    const open = [...form.querySelectorAll("details.tm-calc-more[open]")].map((d) => d.dataset.group);
    if (open.length) pairs.push(["open", open.join(",")]);
    if (keep) pairs.push(["share", "on"]);
    return pairs;
  }

  function setValues(form, pairs) {
    for (const el of form.elements) {
      if (!el.name) continue;
      if (el.type === "checkbox") el.checked = false;
      else el.value = "";
    }
    for (const [name, value] of pairs) {
      if (name === "open") {
        const groups = value.split(",");
        for (const d of form.querySelectorAll("details.tm-calc-more")) d.open = groups.includes(d.dataset.group);
        continue;
      }
      if (name === "share") {
        const share = form.querySelector(".tm-calc-share-config");
        if (share) share.checked = value === "on";
        continue;
      }
      const el = form.elements.namedItem(name);
      if (!el) continue;
      if (el.type === "checkbox") el.checked = value === "on";
      else if (el.tagName === "SELECT" && ![...el.options].some((o) => o.value === value)) {
        el.add(new Option(value, value, true, true));  // the command says what is wrong with it
      } else el.value = value;
      const group = el.closest("details");
      if (group) group.open = true;  // a value given is in view
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

  let lastHash = "";
  function toHash(command, form) {
    const params = new URLSearchParams([["cmd", command], ...linkPairs(form)]);
    lastHash = "#" + params.toString();
    history.replaceState(null, "", lastHash);
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
      const result = panels[i].querySelector(".tm-calc-result");
      if (!result.dataset.status) run(panels[i]);
      else toHash(command, panels[i].querySelector(".tm-calc-form"));
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
    const group = input && input.closest && input.closest("details");
    if (group) group.open = true;
  }

  function showWarnings(panel, warnings) {
    for (const el of panel.querySelectorAll(".tm-calc-warning")) el.textContent = "";
    for (const [field, message] of warnings || []) {
      const box = field && panel.querySelector(`.tm-calc-warning[data-warning-for="${CSS.escape(field)}"]`);
      if (box) box.textContent = (box.textContent ? box.textContent + " " : "") + message;
    }
  }

  // The last result is never left standing beside inputs it is not for: a failure of any kind
  // (bad input, Python's error, a cancel) clears it and says what went wrong.
  function clearResult(panel, status, message, field) {
    const result = panel.querySelector(".tm-calc-result");
    result.dataset.status = String(status);
    result.classList.add("tm-calc-stale");
    result.querySelector(".tm-calc-cmd").textContent = "";
    result.querySelector(".tm-calc-json").textContent = "";
    result.querySelector(".tm-calc-html").innerHTML = "";
    showWarnings(panel, []);
    showError(panel, field, message);
    summarize(panel, message, true);
  }

  function summarize(panel, text, error) {
    const summary = panel.querySelector(".tm-calc-summary");
    summary.querySelector(".tm-calc-summary-text").textContent = text;
    summary.classList.toggle("tm-calc-summary-error", !!error);
    summary.hidden = !text;
    // screen readers hear the one line (errors are announced by their role="alert" boxes)
    panel.querySelector(".tm-calc-announce").textContent = error ? "" : text;
  }

  function busy(panel, on) {
    panel.querySelector(".tm-calc-cancel").hidden = !on;
    panel.querySelector(".tm-calc-busy").hidden = !on;
    panel.querySelector(".tm-calc-result").setAttribute("aria-busy", String(on));
  }

  const state = new Map();  // panel -> { running, again, slow }

  async function run(panel, options = {}) {
    if (!runtime) return;
    const form = panel.querySelector(".tm-calc-form");
    const command = panel.dataset.command;
    const s = state.get(panel) || {};
    state.set(panel, s);
    const result = panel.querySelector(".tm-calc-result");
    result.dataset.pending = "true";  // until the last change has its result (tests wait on it)
    if (s.running) { s.again = true; return; }  // the latest values run when this one ends
    const pairs = valuesOf(form);
    toHash(command, form);
    panel.querySelector(".tm-calc-ask").hidden = true;
    if (options.fromLink) {  // a link cannot start a run that could take minutes unasked
      const ask = await runtime.call("trainmath.cli.calculator", "caution", command, JSON.stringify(pairs));
      if (ask) {
        clearResult(panel, "asked", "");
        panel.querySelector(".tm-calc-ask-text").textContent = ask;
        panel.querySelector(".tm-calc-ask").hidden = false;
        delete result.dataset.pending;
        return;
      }
    }
    result.classList.add("tm-calc-running");
    s.running = true;
    const started = performance.now();
    const slow = setTimeout(() => busy(panel, true), SLOW_MS);
    let out;
    try {
      out = JSON.parse(await runtime.call("trainmath.cli.calculator", "calculate", command,
                                          JSON.stringify(pairs)));
    } catch (e) {
      out = null;
      const message = e.name === "Cancelled"
        ? "Cancelled: no result. Change a field or press Run to compute again."
        : "The calculator could not compute this: " + e.message.trim().split("\n").pop()
          + ". Nothing is shown for these inputs.";
      clearResult(panel, e.name === "Cancelled" ? "cancelled" : "failed", message, null);
    } finally {
      clearTimeout(slow);
      busy(panel, false);
      result.classList.remove("tm-calc-running");
      s.running = false;
    }
    if (out) {
      if (out.status !== 0) {
        clearResult(panel, out.status, out.stderr.trim(), out.field);
        result.querySelector(".tm-calc-cmd").textContent = out.command_line || "";
      } else {
        showError(panel, null, "");
        result.dataset.status = "0";
        result.classList.remove("tm-calc-stale");
        result.querySelector(".tm-calc-cmd").textContent = out.command_line || "";
        result.querySelector(".tm-calc-json").textContent = out.stdout;
        result.querySelector(".tm-calc-html").innerHTML = out.html;
        showWarnings(panel, out.warnings);
        summarize(panel, out.summary + (out.warnings.length ? " (check the inputs marked)" : ""), false);
      }
    }
    const ms = performance.now() - started;
    timings.last = ms;
    if (timings.first === null && out) timings.first = performance.now();
    result.dataset.ms = ms.toFixed(1);
    result.dataset.runs = String(Number(result.dataset.runs || 0) + 1);
    if (s.again) { s.again = false; run(panel); } else delete result.dataset.pending;
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
    form.addEventListener("input", () => {
      clearTimeout(timer);
      panel.querySelector(".tm-calc-result").dataset.pending = "true";
      timer = setTimeout(() => run(panel), 150);
    });
    form.addEventListener("change", (e) => {
      clearTimeout(timer);
      if (e.target.classList.contains("tm-calc-share-config")) toHash(panel.dataset.command, form);
      else run(panel);
    });
    for (const d of form.querySelectorAll("details.tm-calc-more")) {
      d.addEventListener("toggle", () => { if (runtime) toHash(panel.dataset.command, form); });
    }
    panel.querySelector(".tm-calc-cancel").addEventListener("click", () => {
      if (!runtime) return;
      statusBox.classList.remove("tm-calc-ready");
      step(1, "Cancelled: restarting Python…");
      runtime.cancel().then(() => {
        step(4, "Ready: results update as you type.");
        statusBox.classList.add("tm-calc-ready");
      }, (e) => step(0, "Python could not restart: " + e.message));
    });
    panel.querySelector(".tm-calc-ask-run").addEventListener("click", () => run(panel));
  }
  window.addEventListener("hashchange", () => {
    if (location.hash === lastHash) return;
    const state = fromHash();
    if (!state) return;
    const panel = panelOf(state.command);
    setValues(panel.querySelector(".tm-calc-form"), state.pairs);
    select(panel.dataset.command);
    run(panel, { fromLink: true });
  });

  // -- offline, only when asked ----------------------------------------------------------------
  const keep = root.querySelector(".tm-calc-keep");
  let offline = null;
  if (keep) {
    keep.checked = localStorage.getItem("tm-offline") === "yes";
    keep.addEventListener("change", () => {
      localStorage.setItem("tm-offline", keep.checked ? "yes" : "no");
      if (offline) offline(root);
    });
  }

  // -- Python: after the page is usable (calculator-runtime.js, shared with the small calculators) -
  async function boot() {
    const { loadTrainmath, keepOffline } = await import("./calculator-runtime.js");
    offline = keepOffline;
    keepOffline(root);
    runtime = await loadTrainmath(root, (n, text) => {
      if (n === 2 && timings.python === null) timings.python = performance.now();
      if (!root.dataset.ready) step(n, text);
    });
    if (timings.python === null) timings.python = performance.now();
    timings.library = performance.now();
    step(4, "Ready: results update as you type.");
    statusBox.classList.add("tm-calc-ready");
    for (const b of root.querySelectorAll("button[type=submit]")) b.disabled = false;
    const state = fromHash();
    if (state) {
      const panel = panelOf(state.command);
      setValues(panel.querySelector(".tm-calc-form"), state.pairs);
      select(panel.dataset.command);
      await run(panel, { fromLink: true });
    } else {
      await run(panels[0]);
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
