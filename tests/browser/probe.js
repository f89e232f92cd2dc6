/* In-page checks for tests/browser/check_claims.py: injected into each page, measured with the
 * page's real layout. Hover is a dispatched mouseover (mystclaims.js listens for it; the Python side
 * also moves the real pointer over a sample), focus is a real focus(). */
window.__tmProbe = (function () {
  "use strict";

  var BLOCK = "p, li, dt, dd, h1, h2, h3, h4, h5, h6, div.math, .admonition-title, summary, " +
    "caption, figcaption, blockquote, pre";

  function blockOf(el) {
    return el.closest("table") || el.closest(BLOCK) || el.closest("section") || document.body;
  }

  function describe(el) {
    var b = blockOf(el);
    var name = b.localName + (b.id ? "#" + b.id : "") +
      (b.className && typeof b.className === "string" ? "." + b.className.split(/\s+/)[0] : "");
    return name;
  }

  function viewport() {
    var root = document.documentElement;
    return {w: root.clientWidth, h: root.clientHeight};
  }

  function claims(missing) {
    var out = [];
    document.querySelectorAll('template[id^="tm-c-"][id$="-detail"]').forEach(function (t) {
      var id = t.id.replace(/-detail$/, "");
      var el = document.getElementById(id);
      if (el) out.push({el: el, template: t});
      else if (missing) missing.push(id);
    });
    return out;
  }

  // Open the dropdowns and select the tabs around el, so it is rendered.
  function reveal(el) {
    var d = el.closest("details");
    while (d) {
      d.open = true;
      d = d.parentElement && d.parentElement.closest("details");
    }
    var tc = el.closest(".sd-tab-content");
    while (tc) {
      var label = tc.previousElementSibling;
      var input = label && label.previousElementSibling;
      if (input && input.type === "radio" && !input.checked) input.click(); // as a reader would
      tc = tc.parentElement && tc.parentElement.closest(".sd-tab-content");
    }
  }

  function text(node) {
    return node ? node.textContent.replace(/\s+/g, " ").trim() : "";
  }

  function rectOf(el) {
    var r = el.getBoundingClientRect();
    return {left: r.left, top: r.top, right: r.right, bottom: r.bottom, width: r.width,
      height: r.height};
  }

  function fmt(r) {
    return "[" + [r.left, r.top, r.right, r.bottom].map(Math.round).join(", ") + "]";
  }

  function key(target, name) {
    (target || document.body).dispatchEvent(new KeyboardEvent("keydown",
      {key: name, code: name, bubbles: true, cancelable: true}));
  }

  var MATHNS = "http://www.w3.org/1998/Math/MathML";

  // The innermost element under the pointer: a digit's <mn> inside an equation's number.
  function hoverTarget(el) {
    return el.namespaceURI === MATHNS ? (el.querySelector("mn, mi, mo") || el) : el;
  }

  // The popup is open for this claim, inside the viewport, on top, with the arithmetic.
  function checkPopup(c, how, out) {
    var popup = document.getElementById("tm-popup");
    var id = c.el.id;
    var bad = function (msg) { out.push({id: id, how: how, msg: msg}); };
    if (!popup) return bad("no #tm-popup element");
    if (popup.getAttribute("role") !== "tooltip") bad("the popup has no role=tooltip");
    var style = getComputedStyle(popup);
    if (popup.hidden || style.display === "none" || style.visibility === "hidden" ||
        style.position !== "fixed") {
      return bad("the popup is not shown (hidden=" + popup.hidden + ", display=" +
        style.display + ", position=" + style.position + ")");
    }
    var r = rectOf(popup);
    var vp = viewport();
    if (r.width < 20 || r.height < 20) bad("the popup is " + r.width + "×" + r.height + " px");
    if (r.left < -0.5 || r.top < -0.5 || r.right > vp.w + 0.5 || r.bottom > vp.h + 0.5) {
      bad("the popup " + fmt(r) + " is not inside the " + vp.w + "×" + vp.h + " viewport");
    }
    var cx = Math.min(Math.max((r.left + r.right) / 2, 0), vp.w - 1);
    var cy = Math.min(Math.max(r.top + Math.min(r.height / 2, 20), 0), vp.h - 1);
    var top = document.elementFromPoint(cx, cy);
    if (!top || !popup.contains(top)) {
      bad("the popup is covered at its top by " + (top ? top.localName + "." + top.className : "nothing"));
    }
    var want = c.template.content.querySelector(".tm-expr");
    var got = popup.querySelector(".tm-expr");
    if (!got) bad("the popup has no .tm-expr");
    else if (want && text(got) !== text(want)) {
      bad("the popup shows " + JSON.stringify(text(got)) + ", not " + JSON.stringify(text(want)));
    }
    var steps = popup.querySelectorAll(".tm-step").length;
    if (steps < 1) bad("the popup has no .tm-step");
    var a = rectOf(c.el);
    var side = popup.getAttribute("data-side");
    var overlaps = r.left < a.right - 1 && r.right > a.left + 1 && r.top < a.bottom - 1 &&
      r.bottom > a.top + 1;
    if (overlaps && side !== "over") bad("the popup " + fmt(r) + " covers its number " + fmt(a));
    return r;
  }

  function checkHidden(c, how, out) {
    var popup = document.getElementById("tm-popup");
    if (popup && !popup.hidden && getComputedStyle(popup).display !== "none") {
      out.push({id: c.el.id, how: how, msg: "Escape did not hide the popup"});
    }
  }

  // Hover and focus every claim; Escape each time.
  function checkAll() {
    var out = [];
    var missing = [];
    var list = claims(missing);
    var vp = viewport();
    missing.forEach(function (id) {
      out.push({id: id, how: "render", msg: "a template with no number of that id (did " +
        "the math renderer keep \\cssId?)"});
    });
    document.querySelectorAll("math mi, math merror").forEach(function (e) {
      if (e.localName === "merror" || /^\\[A-Za-z]/.test(e.textContent)) {
        out.push({id: "", how: "render", msg: "TeX the math renderer did not know: " +
          e.textContent.slice(0, 120)});
      }
    });
    var stats = {claims: list.length, math: 0, above: 0, below: 0, over: 0};
    var api = window.trainmathClaims;
    var delay = api ? api.hoverDelay : 0;
    if (api) api.hoverDelay = 0; // dispatched hovers: open at once
    // Tab stops as loaded (focus re-roves a block): at most one number per block; none
    // inside links or the table of contents.
    var perBlock = new Map();
    list.forEach(function (c) {
      if (c.el.tabIndex < 0) return;
      var b = blockOf(c.el);
      if (!perBlock.has(b)) perBlock.set(b, []);
      perBlock.get(b).push(c.el.id);
    });
    var stops = 0;
    perBlock.forEach(function (ids, b) {
      stops += ids.length;
      if (ids.length > 1) {
        out.push({id: ids.join(" "), how: "tab", msg: ids.length + " tab stops in one block (" +
          describe(document.getElementById(ids[0])) + ")"});
      }
    });
    stats.claimTabStops = stops;
    document.querySelectorAll("a .tm-claim, a .tm-claim-plain, .toc-tree .tm-claim, " +
        ".toc-drawer .tm-claim, .toc-tree .tm-claim-plain").forEach(function (el) {
      if (el.hasAttribute("tabindex") || el.tabIndex >= 0) {
        out.push({id: el.id || "(plain)", how: "tab", msg: "a number inside a link or the " +
          "table of contents is focusable"});
      }
    });
    list.forEach(function (c, i) {
      var el = c.el;
      var id = el.id;
      if (el.namespaceURI === MATHNS) stats.math++;
      reveal(el);
      el.scrollIntoView({block: i % 2 ? "center" : "end", inline: "nearest", behavior: "instant"});
      var a = rectOf(el);
      if (!a.width || !a.height) {
        out.push({id: id, how: "layout", msg: "the number is not rendered"});
        return;
      }
      if (a.top < -0.5 || a.bottom > vp.h + 0.5 || a.left < -0.5 || a.right > vp.w + 0.5) {
        out.push({id: id, how: "layout", msg: "scrolled into view, the number is at " + fmt(a)});
      }
      if (el.closest("a, .toc-tree, .toc-drawer")) {
        out.push({id: id, how: "contract", msg: "an interactive claim inside a link or the " +
          "table of contents (the contract renders those as span.tm-claim-plain)"});
        return;
      }
      if (!el.hasAttribute("data-tm-bound")) {
        out.push({id: id, how: "bind", msg: "mystclaims.js did not bind this number"});
        return;
      }
      var desc = el.getAttribute("aria-describedby");
      var descEl = desc && document.getElementById(desc);
      var expr = text(c.template.content.querySelector(".tm-expr"));
      if (!descEl) out.push({id: id, how: "aria", msg: "aria-describedby names no element"});
      else if (expr && text(descEl).indexOf(expr) < 0) {
        out.push({id: id, how: "aria", msg: "its description does not hold " + expr});
      }
      // hover
      var target = hoverTarget(el);
      target.dispatchEvent(new MouseEvent("mouseover", {bubbles: true, cancelable: true,
        relatedTarget: document.body, view: window}));
      checkPopup(c, "hover", out);
      if (el.namespaceURI === MATHNS && getComputedStyle(el).borderBottomStyle !== "dotted" &&
          !el.classList.contains("tm-claim-failed")) {
        out.push({id: id, how: "render", msg: "the number in the equation is not underlined"});
      }
      var side = (document.getElementById("tm-popup") || {getAttribute: function () { return ""; }})
        .getAttribute("data-side");
      if (side) stats[side] = (stats[side] || 0) + 1;
      key(document.activeElement, "Escape");
      checkHidden(c, "hover", out);
      target.dispatchEvent(new MouseEvent("mouseout", {bubbles: true, cancelable: true,
        relatedTarget: document.body, view: window}));
      // focus
      el.focus({preventScroll: true});
      if (document.activeElement !== el) {
        out.push({id: id, how: "focus", msg: "focus() did not focus it (tabindex " +
          el.getAttribute("tabindex") + ")"});
      } else {
        checkPopup(c, "focus", out);
        key(el, "Escape");
        checkHidden(c, "focus", out);
        el.blur();
      }
    });
    window.scrollTo({top: 0, left: 0, behavior: "instant"});
    if (api) api.hoverDelay = delay;
    return {failures: out, stats: stats};
  }

  // WCAG contrast of a failed claim's text on its highlight.
  function luminance(rgb) {
    var c = rgb.map(function (v) {
      v /= 255;
      return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4);
    });
    return 0.2126 * c[0] + 0.7152 * c[1] + 0.0722 * c[2];
  }

  function parseColor(s) {
    var ctx = document.createElement("canvas").getContext("2d");
    ctx.fillStyle = "#000";
    ctx.fillStyle = s;
    ctx.fillRect(0, 0, 1, 1);
    var d = ctx.getImageData(0, 0, 1, 1).data;
    return [d[0], d[1], d[2], d[3]];
  }

  function contrast() {
    var out = [];
    document.querySelectorAll("span.tm-claim.tm-claim-failed").forEach(function (el) {
      var st = getComputedStyle(el);
      var fg = parseColor(st.color);
      var bg = parseColor(st.backgroundColor);
      if (bg[3] < 250) {
        out.push({id: el.id, how: "contrast", msg: "the failed claim's background is not opaque"});
        return;
      }
      var l1 = luminance(fg), l2 = luminance(bg);
      var ratio = (Math.max(l1, l2) + 0.05) / (Math.min(l1, l2) + 0.05);
      if (ratio < 4.5) {
        out.push({id: el.id, how: "contrast", msg: "text contrast " + ratio.toFixed(2) +
          " < 4.5 on the failed highlight"});
      }
      var page = parseColor(getComputedStyle(document.body).backgroundColor);
      var mark = parseColor(getComputedStyle(document.body).getPropertyValue("--tm-bad").trim());
      var l3 = luminance(mark), l4 = luminance(page);
      var r2 = (Math.max(l3, l4) + 0.05) / (Math.min(l3, l4) + 0.05);
      if (r2 < 3) {
        out.push({id: el.id, how: "contrast", msg: "the failed mark's contrast " + r2.toFixed(2) +
          " < 3 on the page"});
      }
    });
    return out;
  }

  // The "Show the arithmetic" toggle: inline arithmetic for every claim, and back.
  function checkToggle() {
    var out = [];
    var list = claims();
    var button = document.querySelector(".tm-toggle");
    if (!list.length) {
      if (button) out.push({id: "", how: "toggle", msg: "a page without claims has the toggle"});
      return out;
    }
    if (!button) return [{id: "", how: "toggle", msg: "no 'Show the arithmetic' button"}];
    if (button.getAttribute("aria-pressed") !== "false") {
      out.push({id: "", how: "toggle", msg: "the toggle starts pressed"});
    }
    var article = document.querySelector('article[role="main"]');
    var first = article && article.querySelector("h1, h2, p, ul, table, div.math");
    if (first && first.localName === "h1" &&
        !(first.compareDocumentPosition(button) & Node.DOCUMENT_POSITION_FOLLOWING)) {
      out.push({id: "", how: "toggle", msg: "the toggle is not near the top"});
    }
    button.click();
    var shown = document.querySelectorAll(".tm-inline:not([hidden])").length;
    if (button.getAttribute("aria-pressed") !== "true") {
      out.push({id: "", how: "toggle", msg: "aria-pressed is not true after a click"});
    }
    if (shown !== list.length) {
      out.push({id: "", how: "toggle", msg: shown + " inline arithmetics for " + list.length +
        " claims"});
    }
    button.click();
    shown = document.querySelectorAll(".tm-inline:not([hidden])").length;
    if (shown) out.push({id: "", how: "toggle", msg: shown + " inline arithmetics left shown"});
    try { localStorage.removeItem("trainmath-show-arithmetic"); } catch (e) { /* ignore */ }
    return out;
  }

  // Focus log for the real-Tab walk.
  function startFocusLog() {
    window.__tmFocusLog = [];
    var blocks = [];
    var seq = new Map();
    document.addEventListener("focusin", function (e) {
      var el = e.target;
      var isClaim = !!(el.closest && el.closest(".tm-claim, [data-tm-bound]"));
      var b = isClaim ? blockOf(el) : null;
      if (!seq.has(el)) seq.set(el, seq.size + 1);
      if (b && blocks.indexOf(b) < 0) blocks.push(b);
      window.__tmFocusLog.push({
        claim: isClaim,
        seq: seq.get(el),
        id: el.id || "",
        tag: el.localName,
        inLink: !!(el.closest && el.closest("a") && el.localName !== "a"),
        inToc: !!(el.closest && el.closest(".toc-tree, .toc-drawer")),
        block: isClaim ? describe(el) : "",
        blockKey: b ? blocks.indexOf(b) : -1
      });
    }, true);
  }

  return {claims: claims, reveal: reveal, checkAll: checkAll, contrast: contrast,
    checkToggle: checkToggle, startFocusLog: startFocusLog, blockOf: blockOf,
    describe: describe};
})();
