"""The calculator page: a form made from the command's parser, run in the browser by Pyodide.

- The ``{calculator}`` directive writes one form per subcommand of ``trainmath``
  (:func:`trainmath.cli.calculator.forms`: groups, choices, help and defaults from
  the flag table, :data:`trainmath.cli.flags.FLAGS`), a tab each when there are several, so a flag or a
  subcommand added to the parser appears on the page with no change here. Its options, one per
  subcommand (``:estimate: --model llama-3-8b ...``), give the forms' initial values, checked by
  the parser at build time.
- At the end of the build the site gets the runtime and the library, nothing from a CDN:
  Pyodide's files from the npm package pinned in ``tools/calculator/package-lock.json``
  (``make docs`` runs ``npm ci`` there) into ``_static/pyodide/``, and a wheel of this
  repository (``pip wheel --no-deps --no-build-isolation``, cached by the hash of its sources)
  into ``_static/calculator/``; ``calculator-sw.js``, the service worker that keeps the page
  working offline once loaded, goes to the site's root (a worker's scope is its folder).
- The ``{calculator-widget}`` directive writes a page's small calculator
  (:mod:`trainmath.cli.widget`): a preset's few fields and a chart of what is alive at the
  step's peak, drawn at build time by the library for the preset's example (so a reader without
  JavaScript sees it, with a sentence saying so and a link to the calculator), and redrawn in
  the browser by the same library in the same Pyodide runtime once the reader scrolls to it or
  touches it (``calculator-widget.js``, ``calculator-runtime.js``). Its argument is the preset
  (``memory``, ``zero``, ``distributed``); ``:args:`` replaces the preset's example command line.
"""

from __future__ import annotations

import hashlib
import html
import json
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from docutils import nodes
from docutils.parsers.rst import directives
from sphinx.errors import ExtensionError
from sphinx.util.docutils import SphinxDirective

ROOT = Path(__file__).resolve().parents[2]
PYODIDE = ROOT / "tools" / "calculator" / "node_modules" / "pyodide"
#: The files of Pyodide's npm package the page loads (the rest are for Node or a console).
PYODIDE_FILES = ("pyodide.mjs", "pyodide.asm.mjs", "pyodide.asm.wasm", "python_stdlib.zip",
                 "pyodide-lock.json")
SERVICE_WORKER = Path(__file__).with_name("calculator-sw.js")
WHEEL_CACHE = ROOT / "docs" / "_build" / "calculator-wheel"


def missing_runtime() -> str:
    return (f"the calculator page needs Pyodide in {PYODIDE.relative_to(ROOT)}: run `make docs` "
            "(it runs `npm ci` in tools/calculator; npm is needed: sudo apt-get install -y "
            "nodejs npm)")


def source_hash() -> str:
    """A hash of what the wheel is built from: the package's files and pyproject.toml."""
    h = hashlib.sha256()
    for path in sorted((ROOT / "src" / "trainmath").rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts:
            h.update(str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes() + b"\0")
    h.update((ROOT / "pyproject.toml").read_bytes())
    return h.hexdigest()[:16]


def build_wheel() -> Path:
    """A wheel of this repository, built once per source hash."""
    folder = WHEEL_CACHE / source_hash()
    found = sorted(folder.glob("trainmath-*.whl"))
    if found:
        return found[0]
    folder.mkdir(parents=True, exist_ok=True)
    # From a copy of what the wheel is made of: setuptools' build/ scratch folder in the
    # repository could hold modules since deleted, and would end up in the wheel.
    with tempfile.TemporaryDirectory(prefix="trainmath-wheel-") as tmp:
        for name in ("pyproject.toml", "README.md", "LICENSE"):
            if (ROOT / name).exists():
                shutil.copy2(ROOT / name, Path(tmp) / name)
        shutil.copytree(ROOT / "src" / "trainmath", Path(tmp) / "src" / "trainmath",
                        ignore=shutil.ignore_patterns("__pycache__"))
        subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
                        "--no-build-isolation", "--disable-pip-version-check", "--wheel-dir",
                        str(folder), tmp], check=True, cwd=tmp, stdout=subprocess.DEVNULL)
    (wheel,) = folder.glob("trainmath-*.whl")
    return wheel


def _wheel_name() -> str:
    from importlib.metadata import version

    return f"trainmath-{version('trainmath')}-py3-none-any.whl"


def runner_version() -> str:
    """A hash of the worker's script, so that a browser never runs an older one from its cache."""
    path = Path(__file__).parents[1] / "_static" / "calculator-worker.js"
    return hashlib.sha256(path.read_bytes()).hexdigest()[:8]


def runtime_bytes() -> int:
    """Bytes of the runtime's files the page loads after it is usable."""
    return sum((PYODIDE / name).stat().st_size for name in PYODIDE_FILES)


# -- the form -------------------------------------------------------------------------------------
def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _help(f) -> str:
    """The option's help; a select's list of choices, which the select shows, shortened."""
    if f.kind == "choice" and f.choices:
        listing = ", ".join(f.choices)
        return re.sub(r"\b(one of:?|accepted:?) " + re.escape(listing), "one of the list", f.help)
    return f.help


def _choice_options(f, value: str) -> str:
    """A select's options: the empty one says what leaving it means, as a value."""
    from trainmath.cli.calculator import SETUPS

    empty = f"{f.placeholder} (default)" if f.default else (f.placeholder or "not given")
    options = [f'<option value="">{_e(empty)}</option>']
    for c in f.choices:
        shown = SETUPS[c][0] if f.name == "setup" else c
        options.append(f'<option value="{_e(c)}"{" selected" if c == value else ""}>'
                       f"{_e(shown)}</option>")
    if value and value not in f.choices:  # a link's value the list lacks: the command says why
        options.append(f'<option value="{_e(value)}" selected>{_e(value)}</option>')
    return "".join(options)


def field_html(command: str, f, value: str) -> str:
    ident = f"tm-calc-{command}-{f.name}"
    help_id, error_id = f"{ident}-help", f"{ident}-error"
    described = f'aria-describedby="{help_id} {error_id}"'
    flag = f"<code>{_e(f.flag)}</code>" if f.flag else ""
    if f.label:
        label = f'<label for="{ident}">{_e(f.label)}</label>'
        if flag:
            label += f' <span class="tm-calc-flag">{flag}</span>'
    else:
        label = f'<label for="{ident}">{flag}'
        if f.metavar and f.kind not in ("choice", "flag", "switch"):
            label += f" <var>{_e(f.metavar)}</var>"
        label += "</label>"
    error = (f'<p class="tm-calc-error" id="{error_id}" data-error-for="{_e(f.name)}" '
             'role="alert"></p>')
    warning = f'<p class="tm-calc-warning" data-warning-for="{_e(f.name)}"></p>'
    if f.kind == "choice":
        control = (f'<select id="{ident}" name="{_e(f.name)}" {described}>'
                   f"{_choice_options(f, value)}</select>")
    elif f.kind == "switch":
        empty = f.placeholder or "not given"
        options = [f'<option value="">{_e(empty)}</option>']
        options += [f'<option value="{v}"{" selected" if v == value else ""}>{flag}</option>'
                    for v, flag in (("yes", f.flag), ("no", "--no-" + f.flag[2:]))]
        control = (f'<select id="{ident}" name="{_e(f.name)}" {described}>{"".join(options)}'
                   "</select>")
    elif f.kind == "flag":
        checked = " checked" if value == "on" else ""
        return (f'<div class="tm-calc-field tm-calc-check"><input type="checkbox" id="{ident}" '
                f'name="{_e(f.name)}" value="on"{checked} {described}>{label}'
                f'<p class="tm-calc-help" id="{help_id}">{_e(_help(f))}</p>{error}{warning}'
                "</div>")
    elif f.kind == "file":
        control = (f'<textarea id="{ident}" name="{_e(f.name)}" rows="3" spellcheck="false" '
                   f'data-private="true" {described}>{_e(value)}</textarea>')
    else:
        placeholder = f' placeholder="{_e(f.placeholder)}"' if f.placeholder else ""
        numeric = ' inputmode="numeric"' if f.metavar in ("", "N", "B", "V", "R") else ""
        control = (f'<input type="text" id="{ident}" name="{_e(f.name)}" value="{_e(value)}"'
                   f'{placeholder}{numeric} autocomplete="off" spellcheck="false" {described}>')
    wide = " tm-calc-wide" if f.kind == "file" else ""
    return (f'<div class="tm-calc-field{wide}">{label}{control}'
            f'<p class="tm-calc-help" id="{help_id}">{_e(_help(f))}</p>{error}{warning}</div>')


def form_html(form, values: dict[str, str], hidden: bool) -> str:
    from trainmath.cli.calculator import OPEN

    c = form.command
    groups = []
    actions = (f'<div class="tm-calc-actions"><button type="submit" disabled>Run '
               f'<code>trainmath {c}</code></button>'
               f'<button type="button" class="tm-calc-cancel" hidden>Cancel</button>'
               f'<span class="tm-calc-busy" hidden><progress aria-label="Computing"></progress> '
               f'<span class="tm-calc-busy-text">Computing…</span></span>'
               f'<p class="tm-calc-error" id="tm-calc-{c}-error" data-error-for="" role="alert">'
               f'</p><p class="tm-calc-ask" hidden><span class="tm-calc-ask-text"></span> '
               f'<button type="button" class="tm-calc-ask-run">Run it</button></p></div>'
               f'<p class="tm-calc-summary" hidden><span class="tm-calc-summary-text"></span> '
               f'<a href="#tm-calc-result-{c}">the result</a></p>')
    for g in form.groups:
        fields = "".join(field_html(c, f, values.get(f.name, "")) for f in g.fields)
        if g.quick:
            groups.append(f'<fieldset class="tm-calc-group tm-calc-quick"><legend>'
                          f'{_e(g.title[0].upper() + g.title[1:])}</legend>'
                          f'<div class="tm-calc-fields">{fields}</div></fieldset>{actions}')
            actions = ""
            continue
        given = sum(1 for f in g.fields if values.get(f.name))
        is_open = " open" if given or g.key in OPEN.get(c, ()) else ""
        count = f"{len(g.fields)} options" + (f", {given} set" if given else "")
        groups.append(f'<details class="tm-calc-more" data-group="{_e(g.key)}"{is_open}>'
                      f'<summary>{_e(g.title[0].upper() + g.title[1:])} '
                      f'<span class="tm-calc-count">({_e(count)})</span></summary>'
                      f'<div class="tm-calc-group" role="group" aria-label="{_e(g.title)}">'
                      f'<div class="tm-calc-fields">{fields}</div></div></details>')
    private = any(f.kind == "file" for f in form.fields)
    share = ('<p class="tm-calc-share"><label><input type="checkbox" class="tm-calc-share-config">'
             " share with the config: put the pasted text in the link (it stays out of the "
             "address bar and history otherwise)</label></p>") if private else ""
    attrs = ' role="tabpanel" aria-labelledby="tm-calc-tab-' + c + '"' if hidden is not None else ""
    return (f'<section class="tm-calc-panel" id="tm-calc-panel-{c}" data-command="{c}"{attrs}'
            f'{" hidden" if hidden else ""}>'
            f'<p class="tm-calc-announce tm-calc-sr" role="status"></p>'
            f'<form class="tm-calc-form" data-command="{c}" novalidate '
            f'aria-label="trainmath {c}">{"".join(groups)}{actions}{share}</form>'
            f'<div class="tm-calc-result" id="tm-calc-result-{c}" data-command="{c}">'
            f'<h2 class="tm-calc-sr">The result of trainmath {c}</h2>'
            f'<p class="tm-calc-line">Same as: <code class="tm-calc-cmd"></code></p>'
            f'<div class="tm-calc-html"></div>'
            f'<details class="tm-calc-json-box"><summary>What <code>trainmath {c} --json</code> '
            f'prints</summary><pre class="tm-calc-json" tabindex="0"></pre></details></div>'
            "</section>")


def calculator_html(examples: list[str]) -> str:
    """The page's markup: a tab per subcommand of the command's flag table, each form filled
    with its example's values."""
    from trainmath.cli.calculator import form_values, forms

    initial = {}
    for line in examples:
        command, values = form_values(shlex.split(line))
        initial[command] = dict(values)
    all_forms = forms()
    tabs = ""
    several = len(all_forms) > 1
    if several:
        unfocused = ' tabindex="-1"'
        buttons = "".join(
            f'<button type="button" role="tab" id="tm-calc-tab-{f.command}" '
            f'aria-controls="tm-calc-panel-{f.command}" aria-selected="{str(i == 0).lower()}"'
            f'{"" if i == 0 else unfocused}>{html.escape(f.title)} '
            f'<code>trainmath {f.command}</code></button>'
            for i, f in enumerate(all_forms))
        tabs = f'<div class="tm-calc-tabs" role="tablist" aria-label="Commands">{buttons}</div>'
    panels = "".join(form_html(f, initial.get(f.command, {}), (i > 0) if several else None)
                     for i, f in enumerate(all_forms))
    mb = runtime_bytes() / 1e6
    return (f'<div id="tm-calculator" class="tm-calculator" data-pyodide="_static/pyodide/" '
            f'data-wheel="_static/calculator/{_wheel_name()}?v={source_hash()}" '
            f'data-worker="calculator-sw.js" data-runner="_static/calculator-worker.js?v={runner_version()}">'
            f'<div class="tm-calc-status" role="status"><progress max="4" value="0" '
            f'aria-label="Loading the calculator"></progress> <span class="tm-calc-status-text">'
            f"Loading Python in your browser ({mb:.1f} MB once, then from the cache)…</span>"
            f"</div>{tabs}{panels}"
            f'<p class="tm-calc-offline"><label><input type="checkbox" class="tm-calc-keep"> '
            f"keep the calculator in this browser for use offline ({mb:.1f} MB)</label></p>"
            "</div>")


def _commands() -> list[str]:
    from trainmath.cli.calculator import forms

    return [f.command for f in forms()]


class CalculatorDirective(SphinxDirective):
    """``{calculator}``: the forms. An option per subcommand gives its example arguments, the
    form's initial values (``:estimate: --model llama-3-8b --dp 8``)."""

    has_content = False
    option_spec = {name: directives.unchanged for name in _commands()}

    def run(self):
        if "/" in self.env.docname:
            raise self.error("the calculator page must be at the site's root (its links and "
                             "the service worker's scope are relative to it)")
        if not PYODIDE.is_dir():
            raise self.error(missing_runtime())
        examples = [f"{name} {args}" for name, args in self.options.items()]
        try:
            markup = calculator_html(examples)
        except (ValueError, SystemExit, Exception) as exc:  # a bad example: say which
            raise self.error(f"calculator example {examples!r}: {exc}") from None
        for f in (ROOT / "src" / "trainmath" / "cli").glob("*.py"):
            self.env.note_dependency(str(f))
        return [nodes.raw("", markup, format="html")]


# -- a page's small calculator ---------------------------------------------------------------------
#: The label of each field a small calculator may show (its flag is in the "same as" line).
WIDGET_LABELS = {"model": "model", "recipe": "recipe", "seq-len": "sequence length",
                 "dp": "data parallel (dp)", "tp": "tensor parallel (tp)",
                 "pp": "pipeline parallel (pp)", "zero": "ZeRO stage", "gpu": "GPU",
                 "micro-batch": "micro-batch", "cp": "context parallel (cp)"}


def _widget_field(ident: str, f, value: str) -> str:
    fid = f"{ident}-{f.name}"
    error_id = f"{fid}-error"
    label = f'<label for="{fid}">{_e(WIDGET_LABELS.get(f.name, f.flag))}</label>'
    if f.kind == "choice":
        default = f"default ({f.default})" if f.default else "default"
        options = [f'<option value="">{_e(default)}</option>']
        options += [f'<option value="{_e(c)}"{" selected" if c == value else ""}>{_e(c)}</option>'
                    for c in f.choices]
        control = (f'<select id="{fid}" name="{_e(f.name)}" aria-describedby="{error_id}">'
                   f'{"".join(options)}</select>')
    elif f.kind == "text":
        control = (f'<input type="text" id="{fid}" name="{_e(f.name)}" value="{_e(value)}" '
                   f'inputmode="numeric" autocomplete="off" spellcheck="false" '
                   f'placeholder="{_e(f.default or "default")}" aria-describedby="{error_id}">')
    else:
        raise ValueError(f"the small calculator shows selects and text fields; {f.flag} is a "
                         f"{f.kind}")
    return (f'<div class="tm-calc-field">{label}{control}<p class="tm-calc-error" '
            f'id="{error_id}" data-error-for="{_e(f.name)}" role="alert"></p></div>')


def widget_html(name: str, argv: list[str] | None, ident: str, root: str, calculator: str) -> str:
    """A page's small calculator: the preset's fields filled with its example (or ``argv``), the
    result computed now by the library (:func:`trainmath.cli.widget.calculate`) for a reader
    without JavaScript, and what the script needs to compute it again in the browser. ``root``
    is the site's root relative to the page, ``calculator`` the calculator page's address."""
    from trainmath.cli.calculator import _form
    from trainmath.cli.widget import COMMAND, calculate, preset, split_values

    p = preset(name)
    shown, fixed = split_values(p, p.example if argv is None else argv)
    out = json.loads(calculate(name, json.dumps(shown + fixed)))
    if out["status"]:
        raise ValueError(out["stderr"].strip())
    form = _form(COMMAND)
    fields = "".join(_widget_field(ident, form.field(k), v) for k, v in shown)
    mb = runtime_bytes() / 1e6
    return (
        f'<div class="tm-calc-widget" id="{ident}" data-preset="{_e(name)}" '
        f'data-fixed="{_e(json.dumps(fixed))}" data-pyodide="{root}_static/pyodide/" '
        f'data-wheel="{root}_static/calculator/{_wheel_name()}?v={source_hash()}" '
        f'data-worker="{root}calculator-sw.js" data-runner="{root}_static/calculator-worker.js?v={runner_version()}" data-calculator="{_e(calculator)}">'
        f'<form class="tm-w-form" novalidate aria-label="{_e(p.title)}">'
        f'<fieldset class="tm-w-fieldset" disabled><legend>{_e(p.title)}</legend>'
        f'<div class="tm-w-fields">{fields}</div></fieldset>'
        f'<p class="tm-calc-error" id="{ident}-error" data-error-for="" role="alert"></p></form>'
        f'<div class="tm-w-result" aria-live="polite" data-status="0">'
        f'<p class="tm-w-summary"><strong>{_e(out["summary"])}</strong></p>'
        f'<div class="tm-w-chart">{out["chart"]}</div>'
        f'<p class="tm-w-line">Same as: <code class="tm-w-cmd">{_e(out["command_line"])}</code>'
        f"</p></div>"
        f'<p class="tm-w-status" role="status"><span class="tm-w-nojs">These figures are for the '
        f"inputs shown; to change them this page runs Python in your browser, which needs "
        f"JavaScript.</span></p>"
        f'<p class="tm-w-open"><a href="{_e(calculator)}#{_e(out["link"])}">Open in the '
        f"calculator</a>, with every option (loads Python in your browser, "
        f"{mb:.1f} MB once).</p></div>")


class CalculatorWidgetDirective(SphinxDirective):
    """``{calculator-widget} PRESET``: a page's small calculator (:func:`widget_html`);
    ``:args:`` gives the command line of ``trainmath estimate`` it starts from."""

    required_arguments = 1
    has_content = False
    option_spec = {"args": directives.unchanged}

    def run(self):
        if not PYODIDE.is_dir():
            raise self.error(missing_runtime())
        depth = self.env.docname.count("/")
        root = "../" * depth
        ident = f"tm-w-{self.env.new_serialno('calculator-widget') + 1}"
        argv = shlex.split(self.options["args"]) if "args" in self.options else None
        try:  # the page's address, even from the calculator page itself
            calculator = root + self.env.app.builder.get_target_uri("calculator")
        except Exception:  # a builder without pages (linkcheck): the html name
            calculator = root + "calculator.html"
        try:
            markup = widget_html(self.arguments[0], argv, ident, root, calculator)
        except (ValueError, SystemExit) as exc:  # a bad preset or example: say which
            raise self.error(f"calculator-widget {self.arguments[0]!r} "
                             f"{self.options.get('args', '')!r}: {exc}") from None
        for f in (ROOT / "src" / "trainmath").rglob("*.py"):  # the figures are the library's
            self.env.note_dependency(str(f))
        return [nodes.raw("", markup, format="html")]


# -- the files the page loads ---------------------------------------------------------------------
def _copy(src: Path, dst: Path) -> None:
    if dst.exists() and dst.stat().st_size == src.stat().st_size \
            and dst.stat().st_mtime >= src.stat().st_mtime:
        return
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(src, dst)


def copy_runtime(app, exception) -> None:
    if exception or app.builder.format != "html":
        return
    if "calculator" not in app.env.all_docs:
        return
    if not PYODIDE.is_dir():
        raise ExtensionError(missing_runtime())
    out = Path(app.outdir)
    for name in PYODIDE_FILES:
        _copy(PYODIDE / name, out / "_static" / "pyodide" / name)
    wheel = build_wheel()
    target = out / "_static" / "calculator"
    for old in target.glob("*.whl"):
        if old.name != _wheel_name():
            old.unlink()
    target.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(wheel, target / _wheel_name())
    (out / SERVICE_WORKER.name).write_text(
        SERVICE_WORKER.read_text(encoding="utf-8").replace("__BUILD__", build_version(out)),
        encoding="utf-8")
    add_csp(out)


def build_version(out: Path) -> str:
    """The build's version, for the service worker's cache: a hash of the library's sources,
    Pyodide's lock file and the site's scripts and styles."""
    h = hashlib.sha256(source_hash().encode())
    h.update((PYODIDE / "pyodide-lock.json").read_bytes())
    for path in sorted((out / "_static").glob("*.[jc]s*")):
        if path.is_file():
            h.update(path.name.encode() + path.read_bytes())
    return h.hexdigest()[:16]


# -- the Content-Security-Policy of every page ----------------------------------------------------
#: What a page may load: everything from the site itself, nothing from elsewhere.
#: - script-src: the site's files, plus 'wasm-unsafe-eval', which Pyodide needs to compile its
#:   WebAssembly (pyodide.asm.wasm, WebAssembly.instantiate), and the hash of each inline script
#:   a page still has (furo's one line that sets the theme before the page paints; Sphinx's own
#:   are files), computed from the built page itself;
#: - style-src 'unsafe-inline': the style attributes of the result's bars and of the figures'
#:   SVG (their widths and colours); no inline script can come of it;
#: - worker-src: calculator-worker.js (Python) and the service worker, both from the site;
#: - img-src data:: furo's icons and the figures' data URIs; connect-src: the wheel and
#:   Pyodide's files, fetched from the site.
CSP = ("default-src 'self'; script-src 'self' 'wasm-unsafe-eval'{hashes}; "
       "style-src 'self' 'unsafe-inline'; img-src 'self' data:; font-src 'self' data:; "
       "connect-src 'self'; worker-src 'self'; object-src 'none'; base-uri 'self'; "
       "form-action 'self'")
_INLINE = re.compile(r"<script(?![^>]*\bsrc=)[^>]*>(.*?)</script>", re.S)


def csp_of(page: str) -> str:
    """The policy for one page: :data:`CSP` with the hash of each of its inline scripts."""
    import base64

    hashes = sorted({"'sha256-" + base64.b64encode(hashlib.sha256(body.encode()).digest()).decode()
                     + "'" for body in _INLINE.findall(page) if body.strip()})
    return CSP.format(hashes="".join(" " + h for h in hashes))


def add_csp(out: Path) -> None:
    """Write the policy (:func:`csp_of`) into every page, as the first element of its head."""
    for path in out.rglob("*.html"):
        text = path.read_text(encoding="utf-8")
        text = re.sub(r'<meta http-equiv="Content-Security-Policy"[^>]*>\n?', "", text)
        meta = f'<meta http-equiv="Content-Security-Policy" content="{html.escape(csp_of(text))}">'
        charset = re.search(r"<head>\s*<meta charset=[^>]*>", text)
        at = charset.end() if charset else text.index("<head>") + len("<head>")
        text = text[:at] + "\n" + meta + text[at:]
        path.write_text(text, encoding="utf-8")


def add_widget_script(app, pagename, templatename, context, doctree) -> None:
    """The small calculators' script, on the pages that have one only."""
    if "tm-calc-widget" in context.get("body", ""):
        app.add_js_file("calculator-widget.js", type="module")


def setup(app):
    app.add_directive("calculator", CalculatorDirective)
    app.add_directive("calculator-widget", CalculatorWidgetDirective)
    app.add_css_file("calculator.css")
    app.add_js_file("calculator.js", type="module")
    app.connect("html-page-context", add_widget_script, priority=100)
    app.connect("build-finished", copy_runtime)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
