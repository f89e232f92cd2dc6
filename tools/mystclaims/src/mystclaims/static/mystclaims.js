/* trainmath claims: each checked number shows the arithmetic behind it.
 *
 * The page holds, for each claim, a number (<span class="tm-claim" id="tm-c-N">, or an
 * <mrow class="tm-claim" id="tm-c-N"> inside an equation's MathML, written at build time) and a
 * <template id="tm-c-N-detail"> with its arithmetic.
 * This script:
 *  - moves each arithmetic into one hidden container at the end of <body>, with an id the number
 *    names in aria-describedby;
 *  - shows it in ONE popup (role="tooltip", position: fixed, so no table scroller or admonition
 *    clips it), below the number or above it when there is no room, clamped into the viewport;
 *    open on hover and on focus, kept open while the pointer is on the number or the popup,
 *    closed on leave, blur or Escape (WCAG 1.4.13);
 *  - makes the numbers one tab stop per block (paragraph, list item, table, heading, equation...):
 *    Left/Right/Home/End move between the numbers of a block (a roving tabindex);
 *  - adds a "Show the arithmetic" toggle that writes every arithmetic inline (also for print);
 *  - keeps popup text, raw TeX and hidden code cells out of the search page's snippets.
 */
(function () {
  "use strict";

  var MARGIN = 8; // px between the popup and the viewport's edges
  var GAP = 6; // px between the number and the popup
  var HIDE_DELAY = 150; // ms to cross from the number to the popup
  var HOVER_DELAY = 80; // ms the pointer rests on a number before its popup opens
  var STORE_KEY = "trainmath-show-arithmetic";
  var MATHNS = "http://www.w3.org/1998/Math/MathML";

  var claims = []; // records: {el, id, detail, block, math, inline}
  var byEl = new Map(); // claim element -> record
  var popup, popupBody, popupKeys, store, toggle;
  var active = null; // record shown in the popup
  var hovered = null; // record under the pointer
  var overPopup = false;
  var dismissed = null; // record closed with Escape: stays closed until left and re-entered
  var returning = null; // record that gets the focus back from its popup on Escape
  var hideTimer = 0;
  var showTimer = 0;
  var inlineShown = false;
  var printing = false;
  var pointerAt = ""; // "x,y": where the pointer last really moved to, in the viewport
  var keyboard = false; // a key was pressed since the pointer last moved

  /* ---------------------------------------------------------------- helpers */

  function make(tag, cls, text) {
    var el = document.createElement(tag);
    if (cls) el.className = cls;
    if (text) el.textContent = text;
    return el;
  }

  function claimOf(node) {
    while (node && node !== document) {
      if (byEl.has(node)) return byEl.get(node);
      node = node.parentNode;
    }
    return null;
  }

  function isShown(el) {
    return el.getClientRects().length > 0;
  }

  // The block a claim belongs to: one tab stop per block.
  var BLOCK = "h1, h2, h3, h4, h5, h6, p, li, dt, dd, caption, figcaption, summary, " +
    "blockquote, pre, div.math, .admonition-title, .sd-tab-label, .sd-card-title, td, th";

  function blockOf(el) {
    var table = el.closest("table");
    if (table) return table;
    var math = el.closest("math");
    if (math && math.getAttribute("display") === "block") return math.closest("div.math") || math;
    return el.closest(BLOCK) || el.closest("section, article, main, body");
  }

  // The text a number in an equation reads as, from its MathML: 2^30, a/b.
  function mathText(node) {
    var kids = node.children;
    var name = node.localName;
    if (!kids || !kids.length) return node.textContent.trim();
    if (name === "msup") return mathText(kids[0]) + "^" + mathText(kids[1]);
    if (name === "msub") return mathText(kids[0]) + "_" + mathText(kids[1]);
    if (name === "mfrac") return mathText(kids[0]) + "/" + mathText(kids[1]);
    var out = "";
    for (var i = 0; i < kids.length; i++) out += mathText(kids[i]);
    return out;
  }

  /* ---------------------------------------------------------------- binding */

  function detailFor(id, template, failed) {
    var detail = template.content.querySelector(".tm-detail");
    detail = detail ? detail.cloneNode(true) : make("div", "tm-detail");
    detail.id = id + "-arithmetic";
    if (!detail.querySelector(".tm-detail-label")) {
      detail.insertBefore(make("div", "tm-detail-label", "The arithmetic"), detail.firstChild);
    }
    if (failed) {
      detail.insertBefore(make("div", "tm-detail-failed",
        "This number does not match its arithmetic."), detail.firstChild);
    }
    return detail;
  }

  function bind(el, template) {
    var id = el.id;
    var math = el.namespaceURI === MATHNS;
    var failed = el.classList.contains("tm-claim-failed");
    var rec = {el: el, id: id, detail: detailFor(id, template, failed), math: math,
      template: template, block: null, inline: null};
    store.appendChild(rec.detail);
    if (math) prepareMath(rec);
    rec.block = blockOf(el);
    el.setAttribute("aria-describedby", rec.detail.id);
    el.setAttribute("data-tm-bound", "");
    el.tabIndex = -1;
    byEl.set(el, rec);
    claims.push(rec);
    return rec;
  }

  // A number inside an equation's MathML: its CSS draws the underline and the highlight; the
  // inline arithmetic names it by the text it reads as.
  function prepareMath(rec) {
    rec.label = mathText(rec.el);
    rec.el.classList.add("tm-math-claim");
  }

  function bindAll() {
    var templates = document.querySelectorAll('template[id^="tm-c-"]');
    var added = [];
    for (var i = 0; i < templates.length; i++) {
      var t = templates[i];
      var id = t.id.replace(/-detail$/, "");
      if (id === t.id) continue;
      var el = document.getElementById(id);
      if (!el || byEl.has(el) || el.closest("a, .toc-tree, .toc-drawer")) continue;
      added.push(bind(el, t));
    }
    if (added.length) {
      claims.sort(function (a, b) {
        return a.el.compareDocumentPosition(b.el) & Node.DOCUMENT_POSITION_FOLLOWING ? -1 : 1;
      });
      rove();
      if (inlineShown) added.forEach(showInline);
    }
    return added.length;
  }

  // One tab stop per block: the block's first claim, or the one last focused in it.
  function rove() {
    var seen = new Set();
    claims.forEach(function (rec) {
      if (rec.el.tabIndex === 0) seen.add(rec.block);
    });
    claims.forEach(function (rec) {
      if (seen.has(rec.block)) return;
      rec.el.tabIndex = 0;
      seen.add(rec.block);
    });
  }

  function blockClaims(rec) {
    return claims.filter(function (r) { return r.block === rec.block && isShown(r.el); });
  }

  function moveTo(from, to) {
    if (!to || to === from) return;
    from.el.tabIndex = -1;
    to.el.tabIndex = 0;
    to.el.focus();
  }

  /* ---------------------------------------------------------------- the popup */

  function buildPopup() {
    store = make("div", "tm-detail-store");
    store.id = "tm-details";
    store.hidden = true;
    document.body.appendChild(store);
    popup = make("div", "tm-popup");
    popup.id = "tm-popup";
    popup.setAttribute("role", "tooltip");
    // Focusable by a tap or a click (not by Tab), so a finger that lands on the popup next to
    // its number is not moved onto the number by the browser's touch adjustment.
    popup.tabIndex = -1;
    popup.hidden = true;
    popupBody = make("div", "tm-popup-body");
    popupKeys = make("div", "tm-popup-keys");
    popupKeys.setAttribute("aria-hidden", "true");
    popup.appendChild(popupBody);
    popup.appendChild(popupKeys);
    document.body.appendChild(popup);
    popup.addEventListener("mouseenter", function () { overPopup = true; cancelHide(); });
    popup.addEventListener("mouseleave", function () { overPopup = false; scheduleHide(); });
    popup.addEventListener("focusout", function () { scheduleHide(); });
  }

  function show(rec, how) {
    if (inlineShown || printing) return;
    cancelHide();
    if (active !== rec) {
      if (active) {
        active.el.classList.remove("tm-claim-active");
        store.appendChild(active.detail);
      }
      active = rec;
      popupBody.appendChild(rec.detail);
      rec.el.classList.add("tm-claim-active");
    }
    var link = rec.detail.querySelector("a[href]");
    var keys = [];
    if (how === "focus") {
      if (blockClaims(rec).length > 1) keys.push("\u2190 \u2192 next number");
      if (link) keys.push("Enter: source");
      keys.push("Esc: close");
    }
    popupKeys.textContent = keys.join(" \u00b7 ");
    popupKeys.hidden = !keys.length;
    popup.classList.toggle("tm-popup-failed", rec.el.classList.contains("tm-claim-failed"));
    popup.hidden = false;
    place();
  }

  function hide() {
    cancelHide();
    if (!active) return;
    active.el.classList.remove("tm-claim-active");
    store.appendChild(active.detail);
    active = null;
    overPopup = false;
    popup.hidden = true;
  }

  function cancelHide() {
    if (hideTimer) clearTimeout(hideTimer);
    hideTimer = 0;
  }

  function scheduleHide() {
    cancelHide();
    hideTimer = setTimeout(settle, HIDE_DELAY);
  }

  // After a leave or a blur: keep the popup for what still holds the pointer or the focus.
  function settle() {
    hideTimer = 0;
    if (!active) return;
    var focused = claimOf(document.activeElement);
    var inside = document.activeElement;
    if (overPopup || (inside !== popup && popup.contains(inside))) return; // e.g. on its link
    if (hovered && hovered !== dismissed) return show(hovered, "hover");
    if (hovered === active || focused === active) return;
    if (focused && focused !== dismissed) return show(focused, "focus");
    hide();
  }

  function viewport() {
    var root = document.documentElement;
    return {w: root.clientWidth || window.innerWidth, h: root.clientHeight || window.innerHeight};
  }

  // Below the number, or above when it fits there and not below; clamped into the viewport.
  function place() {
    if (!active) return;
    var r = active.el.getBoundingClientRect();
    var vp = viewport();
    if (r.bottom < 0 || r.top > vp.h || r.right < 0 || r.left > vp.w || !r.width) {
      hide(); // scrolled away or hidden
      return;
    }
    var s = popup.style;
    s.maxWidth = Math.max(0, vp.w - 2 * MARGIN) + "px";
    s.maxHeight = "";
    s.left = "0px";
    s.top = "0px";
    var w = popup.offsetWidth;
    var h = popup.offsetHeight;
    var below = vp.h - r.bottom - GAP - MARGIN;
    var above = r.top - GAP - MARGIN;
    var side;
    if (h <= below) side = "below";
    else if (h <= above) side = "above";
    else side = below >= above ? "below" : "above";
    var room = side === "below" ? below : above;
    if (h > room) {
      if (room >= 120) {
        s.maxHeight = room + "px"; // scrolls inside
        h = room;
      } else {
        side = "over"; // no room on either side: as close as it fits, inside the viewport
        s.maxHeight = (vp.h - 2 * MARGIN) + "px";
        h = Math.min(h, vp.h - 2 * MARGIN);
      }
    }
    var top = side === "below" ? r.bottom + GAP
      : side === "above" ? r.top - GAP - h
        : Math.min(Math.max(r.bottom + GAP, MARGIN), vp.h - MARGIN - h);
    var left = Math.min(Math.max(r.left, MARGIN), Math.max(MARGIN, vp.w - MARGIN - w));
    s.left = Math.round(left) + "px";
    s.top = Math.round(top) + "px";
    popup.setAttribute("data-side", side);
    var caret = Math.min(Math.max(r.left + Math.min(r.width, 40) / 2 - left, 10), w - 10);
    s.setProperty("--tm-caret-x", Math.round(caret) + "px");
  }

  var placeQueued = false;
  function queuePlace() {
    if (!active || placeQueued) return;
    placeQueued = true;
    requestAnimationFrame(function () { placeQueued = false; place(); });
  }

  /* ---------------------------------------------------------------- events */

  // A pointer that only crosses a number on its way elsewhere opens nothing.
  function onOver(e) {
    var rec = claimOf(e.target);
    if (!rec || hovered === rec) return; // not a number, or moving inside the number
    // The page scrolled a number under a pointer at rest while the reader uses the keyboard:
    // not a hover, and it must not take the popup from the focused number.
    if (keyboard && pointerAt === e.clientX + "," + e.clientY) return;
    hovered = rec;
    if (rec === dismissed) return;
    dismissed = null;
    clearTimeout(showTimer);
    if (api.hoverDelay > 0) {
      showTimer = setTimeout(function () {
        if (hovered === rec && !(keyboard && claimOf(document.activeElement))) show(rec, "hover");
      }, api.hoverDelay);
    } else {
      show(rec, "hover");
    }
  }

  function onOut(e) {
    var rec = claimOf(e.target);
    if (!rec || claimOf(e.relatedTarget) === rec) return;
    clearTimeout(showTimer);
    hovered = null;
    if (dismissed === rec) dismissed = null;
    scheduleHide();
  }

  function onFocusIn(e) {
    var rec = claimOf(e.target);
    if (!rec) return;
    rec.el.tabIndex = 0; // roving: the focused number is its block's tab stop
    claims.forEach(function (r) {
      if (r.block === rec.block && r !== rec) r.el.tabIndex = -1;
    });
    if (returning === rec) return;
    dismissed = null;
    show(rec, "focus");
  }

  function onFocusOut(e) {
    var rec = claimOf(e.target);
    if (!rec) return;
    if (dismissed === rec && hovered !== rec) dismissed = null;
    scheduleHide();
  }

  // A tap or click anywhere but the number and its popup closes it (a second quick tap may
  // bring no mouse events at all).
  function onPointerDown(e) {
    if (!active || popup.contains(e.target) || claimOf(e.target)) return;
    hide();
  }

  function onMove(e) {
    var at = e.clientX + "," + e.clientY;
    if (at === pointerAt) return; // the browser's own move after a scroll: the pointer rests
    pointerAt = at;
    keyboard = false;
  }

  function onKey(e) {
    keyboard = true;
    if (e.altKey || e.ctrlKey || e.metaKey) return;
    var inPopup = popup && popup.contains(e.target);
    if (e.key === "Escape" || e.key === "Esc") {
      if (!active) return;
      var rec = active;
      dismissed = rec;
      hide();
      if (inPopup) { // back to the number, and the popup stays closed
        returning = rec;
        rec.el.focus();
        returning = null;
      }
      e.preventDefault();
      e.stopPropagation();
      return;
    }
    if (inPopup && e.key === "Tab" && active) {
      e.preventDefault(); // back to the number; the next Tab goes on from there
      active.el.focus();
      return;
    }
    var cur = claimOf(e.target);
    if (!cur || e.target !== cur.el) return;
    var list, i;
    switch (e.key) {
      case "ArrowRight":
      case "ArrowLeft":
      case "Home":
      case "End":
        if (e.shiftKey) return;
        list = blockClaims(cur);
        i = list.indexOf(cur);
        if (e.key === "ArrowRight") i = Math.min(i + 1, list.length - 1);
        else if (e.key === "ArrowLeft") i = Math.max(i - 1, 0);
        else if (e.key === "Home") i = 0;
        else i = list.length - 1;
        moveTo(cur, list[i]);
        e.preventDefault();
        e.stopPropagation(); // Sphinx's doctools would turn the page on Left/Right
        return;
      case "Enter":
        if (active !== cur) { // closed with Escape: Enter opens it again, at its source
          dismissed = null;
          show(cur, "focus");
          e.preventDefault();
        }
        var link = cur.detail.querySelector("a[href]");
        if (link) {
          link.focus();
          e.preventDefault();
          e.stopPropagation();
        }
        return;
    }
  }

  /* ---------------------------------------------------------------- inline arithmetic */

  function inlineNode(rec) {
    var d = rec.detail;
    var out = make("span", "tm-inline");
    if (rec.math) out.appendChild(make("span", "tm-inline-label", (rec.label || "") + ":"));
    if (d.querySelector(".tm-detail-failed")) {
      out.appendChild(make("span", "tm-inline-failed", "does not hold:"));
    }
    var expr = d.querySelector(".tm-expr");
    if (expr) out.appendChild(make("code", "tm-inline-expr", expr.textContent.trim()));
    var steps = d.querySelectorAll(".tm-step");
    for (var i = 0; i < steps.length; i++) {
      var cls = steps[i].classList.contains("tm-value") ? "tm-inline-step tm-inline-value"
        : "tm-inline-step";
      out.appendChild(document.createTextNode(" "));
      out.appendChild(make("span", cls, steps[i].textContent.trim()));
    }
    var src = d.querySelector(".tm-source a[href]");
    if (src) {
      var a = make("a", "tm-inline-source", "source");
      a.href = src.getAttribute("href");
      a.title = src.textContent.trim();
      a.setAttribute("aria-label", "source: " + src.textContent.trim());
      out.appendChild(document.createTextNode(" "));
      out.appendChild(a);
    }
    return out;
  }

  function showInline(rec) {
    if (rec.inline) {
      rec.inline.hidden = false;
    } else {
      rec.inline = inlineNode(rec);
      if (rec.math) {
        // After the equation: a list under a display equation, inline after inline math.
        var holder = rec.el.closest("div.math, span.math") || rec.el.closest("math");
        var display = holder.localName === "div" || holder.getAttribute("display") === "block";
        var list = holder.nextElementSibling;
        while (list && list.localName === "template") list = list.nextElementSibling;
        if (!list || !list.classList.contains("tm-inline-list")) {
          list = make(display ? "div" : "span", "tm-inline-list");
          holder.parentNode.insertBefore(list, holder.nextSibling);
        }
        list.appendChild(rec.inline);
      } else {
        rec.el.parentNode.insertBefore(rec.inline, rec.el.nextSibling);
      }
    }
    rec.el.removeAttribute("aria-describedby"); // it is on the page now: say it once
  }

  function hideInline(rec) {
    if (rec.inline) rec.inline.hidden = true;
    rec.el.setAttribute("aria-describedby", rec.detail.id);
  }

  function setInline(on, remember) {
    inlineShown = on;
    if (on) hide();
    claims.forEach(on ? showInline : hideInline);
    document.documentElement.classList.toggle("tm-arithmetic-shown", on);
    if (toggle) toggle.setAttribute("aria-pressed", on ? "true" : "false");
    if (remember) {
      try { localStorage.setItem(STORE_KEY, on ? "1" : "0"); } catch (e) { /* private mode */ }
    }
  }

  function buildToggle() {
    var article = document.querySelector('article[role="main"]') || document.querySelector("main");
    if (!article) return;
    var bar = make("div", "tm-toggle-bar");
    toggle = make("button", "tm-toggle");
    toggle.type = "button";
    toggle.setAttribute("aria-pressed", "false");
    toggle.appendChild(make("span", "tm-toggle-mark"));
    toggle.appendChild(document.createTextNode("Show the arithmetic"));
    toggle.addEventListener("click", function () {
      setInline(toggle.getAttribute("aria-pressed") !== "true", true);
    });
    bar.appendChild(toggle);
    bar.appendChild(make("span", "tm-toggle-hint",
      "or hover over, tap or Tab to any dotted number"));
    var h1 = article.querySelector("h1");
    if (h1) h1.parentNode.insertBefore(bar, h1.nextSibling);
    else article.insertBefore(bar, article.firstChild);
  }

  /* ---------------------------------------------------------------- search snippets */

  var GREEK = {
    alpha: "α", beta: "β", gamma: "γ", delta: "δ", epsilon: "ε", varepsilon: "ε", zeta: "ζ",
    eta: "η", theta: "θ", vartheta: "ϑ", iota: "ι", kappa: "κ", lambda: "λ", mu: "μ", nu: "ν",
    xi: "ξ", pi: "π", rho: "ρ", sigma: "σ", tau: "τ", upsilon: "υ", phi: "φ", varphi: "φ",
    chi: "χ", psi: "ψ", omega: "ω", Gamma: "Γ", Delta: "Δ", Theta: "Θ", Lambda: "Λ", Xi: "Ξ",
    Pi: "Π", Sigma: "Σ", Upsilon: "Υ", Phi: "Φ", Psi: "Ψ", Omega: "Ω"
  };
  var SYMBOL = {
    times: "×", cdot: "·", cdots: "⋯", ldots: "…", dots: "…", approx: "≈", le: "≤", leq: "≤",
    ge: "≥", geq: "≥", ne: "≠", neq: "≠", pm: "±", to: "→", rightarrow: "→", infty: "∞",
    sum: "Σ", prod: "Π", sqrt: "√", log: "log", ln: "ln", exp: "exp", max: "max", min: "min",
    lceil: "⌈", rceil: "⌉", lfloor: "⌊", rfloor: "⌋", "{": "{", "}": "}", "%": "%", "$": "$",
    "&": "&", "#": "#", "_": "_", ",": " ", ";": " ", ":": " ", " ": " ", quad: " ", qquad: " ",
    "\\": " "
  };
  var KEEP_ARG = /^(text|textrm|textit|textbf|mathrm|mathit|mathbf|mathsf|mathtt|mbox|operatorname|nonclaim|boldsymbol|bm)$/;

  // Readable plain text for TeX: \claim{a}{b} -> a, \text{x} -> x, \alpha -> α, ...
  function texToText(tex) {
    var s = tex.replace(/\\[()[\]]/g, " ");
    var i = 0;
    function group() { // the next argument: {...} or one token
      while (s[i] === " ") i++;
      if (s[i] === "{") {
        var depth = 0, start = ++i;
        for (; i < s.length; i++) {
          if (s[i] === "\\") { i++; continue; }
          if (s[i] === "{") depth++;
          else if (s[i] === "}") { if (!depth) break; depth--; }
        }
        var inner = s.slice(start, i);
        i++;
        return inner;
      }
      if (s[i] === "\\") {
        var m = /^\\([A-Za-z]+|.)/.exec(s.slice(i));
        i += m ? m[0].length : 1;
        return m ? m[0] : "";
      }
      return s[i++] || "";
    }
    function wrap(x) { // a/b, 2^30, (e-1)/2: brackets only where they are needed
      x = x.trim();
      return /^[\w.\u0370-\u03ff]*$/.test(x) ? x : "(" + x + ")";
    }
    function run(src) {
      var saved = [s, i];
      s = src;
      i = 0;
      var out = "";
      while (i < s.length) {
        var c = s[i];
        if (c === "\\") {
          var m = /^\\([A-Za-z]+|.)/.exec(s.slice(i)) || ["\\", ""];
          i += m[0].length;
          var name = m[1];
          if (name === "claim" || name === "class" || name === "cssId" || name === "href" ||
              name === "style") {
            var first = group();
            var second = group();
            out += run(name === "claim" ? first : second);
          } else if (KEEP_ARG.test(name)) {
            out += run(group());
          } else if (name === "frac" || name === "dfrac" || name === "tfrac") {
            out += wrap(run(group())) + "/" + wrap(run(group()));
          } else if (name === "begin" || name === "end") {
            group();
          } else if (GREEK[name]) {
            out += GREEK[name];
          } else if (SYMBOL[name] !== undefined) {
            out += SYMBOL[name];
          } // any other command (\left, \right, \mathcal...) is dropped; its argument stays
        } else if (c === "{" || c === "}" || c === "&") {
          i++;
        } else if (c === "^" || c === "_") {
          i++;
          out += c + wrap(run(group()));
        } else if (c === "~") {
          out += " ";
          i++;
        } else {
          out += c;
          i++;
        }
      }
      s = saved[0];
      i = saved[1];
      return out;
    }
    return " " + run(s).replace(/\s+/g, " ").trim() + " ";
  }

  function cleanForSearch(doc) {
    var drop = "template, .tm-detail, .tm-popup, .tm-inline, .tm-inline-list, .tm-toggle-bar, " +
      ".tm-claim-detail, .cell details.hide, .tag_hide-input .cell_input, " +
      ".tag_hide-cell .cell_input, .tag_hide-cell .cell_output, .tag_hide-output .cell_output, " +
      ".tag_remove-input .cell_input";
    doc.querySelectorAll(drop).forEach(function (el) { el.remove(); });
    // An equation's MathML reads badly as text ("sbh(34+5ash)"): its TeX, made readable.
    doc.querySelectorAll(".math").forEach(function (el) {
      var maths = el.querySelectorAll("math[alttext]");
      var tex = maths.length ? Array.prototype.map.call(maths, function (m) {
        return m.getAttribute("alttext");
      }).join(" ") : el.textContent;
      el.textContent = texToText(tex);
    });
  }

  function wrapSearch() {
    /* global Search */
    if (typeof Search === "undefined" || !Search || typeof Search.htmlToText !== "function" ||
        Search.htmlToText.trainmath) return;
    var original = Search.htmlToText;
    var wrapped = function (htmlString, anchor) {
      try {
        var doc = new DOMParser().parseFromString(htmlString, "text/html");
        cleanForSearch(doc);
        htmlString = "<!DOCTYPE html>" + doc.documentElement.outerHTML;
      } catch (e) { /* fall back to Sphinx's own text */ }
      return original.call(this, htmlString, anchor);
    };
    wrapped.trainmath = true;
    Search.htmlToText = wrapped;
  }

  /* ---------------------------------------------------------------- start */

  function start() {
    wrapSearch();
    var templates = document.querySelectorAll('template[id^="tm-c-"]');
    if (!templates.length) return;
    buildPopup();
    bindAll();
    buildToggle();
    document.addEventListener("mousemove", onMove, {capture: true, passive: true});
    document.addEventListener("mouseover", onOver);
    document.addEventListener("mouseout", onOut);
    document.addEventListener("focusin", onFocusIn);
    document.addEventListener("focusout", onFocusOut);
    document.addEventListener("keydown", onKey, true);
    document.addEventListener("pointerdown", onPointerDown, true);
    window.addEventListener("scroll", queuePlace, {capture: true, passive: true});
    window.addEventListener("resize", queuePlace, {passive: true});
    window.addEventListener("beforeprint", function () {
      printing = true;
      hide();
      if (!inlineShown) { setInline(true, false); printing = "restore"; }
    });
    window.addEventListener("afterprint", function () {
      if (printing === "restore") setInline(false, false);
      printing = false;
    });
    var wanted = false;
    try { wanted = localStorage.getItem(STORE_KEY) === "1"; } catch (e) { /* private mode */ }
    if (wanted) setInline(true, false);
  }

  wrapSearch(); // searchtools.js may already be loaded; else start() tries again
  var api = window.trainmathClaims = {
    hoverDelay: HOVER_DELAY, // the browser check sets 0 to hover hundreds of numbers at once
    texToText: texToText,
    cleanForSearch: cleanForSearch,
    wrapSearch: wrapSearch,
    bind: bindAll,
    setInline: setInline,
    get active() { return active ? active.el : null; }
  };
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
