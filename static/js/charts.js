/* Suanchi 算池 — draw the plotly charts of a page.
 * Each chart is an empty <div data-plotly-chart id="…"> followed by
 * <script type="application/json" data-plotly-figure="…"> holding {figure, config, height}
 * (apps/inventory/charts.py figure_html). A JSON data block is never executed, so the page needs no
 * inline script under its Content-Security-Policy; plotly.js itself comes from our static files. */
(function () {
  "use strict";

  function draw(block) {
    var target = document.getElementById(block.getAttribute("data-plotly-figure"));
    if (!target || target.getAttribute("data-plotly-drawn") || !window.Plotly) {
      return;
    }
    var spec;
    try {
      spec = JSON.parse(block.textContent);
    } catch (e) {
      return;
    }
    target.setAttribute("data-plotly-drawn", "1");
    /* CSSOM writes are not inline style attributes: CSP style-src does not block them. */
    target.style.width = "100%";
    target.style.height = spec.height || "360px";
    var figure = spec.figure || {};
    window.Plotly.newPlot(target, figure.data || [], figure.layout || {}, spec.config || {});
  }

  function drawAll() {
    var blocks = document.querySelectorAll("script[data-plotly-figure]");
    for (var i = 0; i < blocks.length; i++) {
      draw(blocks[i]);
    }
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", drawAll);
  } else {
    drawAll();
  }
})();
