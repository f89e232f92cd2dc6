/* trainmath: a display equation wider than the column is set smaller, down to 3/4 of its size,
 * so that on a phone it fits rather than scrolls; a code block, a table or an equation that
 * still scrolls sideways gets a tab stop, so a keyboard can scroll it (WCAG 2.1.1; axe:
 * scrollable-region-focusable). Both depend on the width of the window, so they are decided
 * here, and again when the window is resized. */
(function () {
  "use strict";
  var SCROLLERS = "pre, .table-wrapper, div.math, .cell_output .output";

  function scrolls(el) {
    var style = getComputedStyle(el);
    var x = /auto|scroll/.test(style.overflowX) && el.scrollWidth > el.clientWidth + 1;
    var y = /auto|scroll/.test(style.overflowY) && el.scrollHeight > el.clientHeight + 1;
    return x || y;
  }

  var SMALLEST = 0.75;

  function fit() {
    document.querySelectorAll("div.math > math").forEach(function (m) {
      m.style.fontSize = "";
      var box = m.parentNode;
      if (!box.clientWidth || box.scrollWidth <= box.clientWidth + 1) return;
      var scale = Math.max(SMALLEST, Math.floor(box.clientWidth / box.scrollWidth * 100) / 100);
      m.style.fontSize = scale * 100 + "%";
    });
  }

  function mark() {
    fit();
    document.querySelectorAll(SCROLLERS).forEach(function (el) {
      if (scrolls(el)) {
        if (!el.hasAttribute("tabindex")) {
          el.tabIndex = 0;
          el.setAttribute("data-tm-scroller", "");
        }
      } else if (el.hasAttribute("data-tm-scroller")) {
        el.removeAttribute("tabindex");
        el.removeAttribute("data-tm-scroller");
      }
    });
  }

  var queued = 0;
  function later() {
    clearTimeout(queued);
    queued = setTimeout(mark, 150);
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", mark);
  else mark();
  window.addEventListener("load", mark);
  window.addEventListener("resize", later, {passive: true});
  document.addEventListener("toggle", later, true); // a dropdown opened: its blocks have a size now
  document.addEventListener("change", later); // a tab chosen
})();

/* furo's "Back to top" link sits outside the page's landmarks (axe: region): it goes into a
 * navigation landmark of its own, where a screen reader's list of landmarks finds it. */
(function () {
  "use strict";
  var link = document.querySelector(".back-to-top");
  if (!link || link.closest("nav, header, main, footer, aside")) return;
  var nav = document.createElement("nav");
  nav.setAttribute("aria-label", "Back to top");
  link.parentNode.insertBefore(nav, link);
  nav.appendChild(link);
})();
