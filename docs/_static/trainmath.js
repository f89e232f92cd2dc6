/* trainmath: a code block or a table that scrolls sideways gets a tab stop, so a keyboard can
 * scroll it (WCAG 2.1.1; axe: scrollable-region-focusable). Which ones scroll depends on the
 * width of the window, so it is decided here, and again when the window is resized. */
(function () {
  "use strict";
  var SCROLLERS = "pre, .table-wrapper, div.math, .cell_output .output";

  function scrolls(el) {
    var style = getComputedStyle(el);
    var x = /auto|scroll/.test(style.overflowX) && el.scrollWidth > el.clientWidth + 1;
    var y = /auto|scroll/.test(style.overflowY) && el.scrollHeight > el.clientHeight + 1;
    return x || y;
  }

  function mark() {
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
