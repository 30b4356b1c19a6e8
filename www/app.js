/* spindle demo: show how long the page took to load. */
(function () {
  "use strict";
  function report() {
    var el = document.getElementById("load-time");
    if (!el) return;
    var ms = null;
    if (window.performance && performance.getEntriesByType) {
      var nav = performance.getEntriesByType("navigation")[0];
      if (nav && nav.loadEventStart > 0) ms = nav.loadEventStart - nav.startTime;
      else if (nav && nav.domContentLoadedEventEnd > 0) ms = nav.domContentLoadedEventEnd - nav.startTime;
    }
    if (ms === null && window.performance && performance.now) ms = performance.now();
    el.textContent = ms === null ? "page loaded" : "page loaded in " + ms.toFixed(1) + " ms";
  }
  if (document.readyState === "complete") report();
  else window.addEventListener("load", function () { setTimeout(report, 0); });
})();
