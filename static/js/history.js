/* Suanchi 算池 — the metric history of a card or a node (issue 29 §5).
 * A panel with data-history-url (apps/telemetry/history_views.py) polls that JSON every
 * data-history-interval seconds (0 = never: a custom range that does not end now) while the tab is
 * visible, and redraws each chart <div id="<prefix>-<metric>-chart"> with Plotly.react from
 * {"charts": {metric: {figure, config, height} | null}, "notes": {metric: [text]}}. A chart without
 * data shows its "No data" line instead. Everything comes from the site's own JSON and is set as text
 * or drawn by plotly: no HTML is parsed, and no inline script is needed under the CSP. */
(function () {
  "use strict";

  var MIN_INTERVAL_S = 10;

  function apply(panel, body) {
    var prefix = panel.getAttribute("data-history-prefix");
    var charts = body.charts || {};
    var notes = body.notes || {};
    var sections = panel.querySelectorAll("[data-history-metric]");
    for (var i = 0; i < sections.length; i++) {
      var section = sections[i];
      var key = section.getAttribute("data-history-metric");
      var target = document.getElementById(prefix + "-" + key + "-chart");
      var empty = section.querySelector("[data-history-empty]");
      var spec = charts[key];
      if (target && window.Plotly) {
        if (spec) {
          var figure = spec.figure || {};
          target.style.width = "100%";
          target.style.height = spec.height || "300px";
          target.setAttribute("data-plotly-drawn", "1");
          window.Plotly.react(target, figure.data || [], figure.layout || {}, spec.config || {});
          if (empty) { empty.hidden = true; }
        } else {
          if (target.getAttribute("data-plotly-drawn")) {
            window.Plotly.purge(target);
            target.removeAttribute("data-plotly-drawn");
          }
          target.style.height = "0";
          if (empty) { empty.hidden = false; }
        }
      }
      var list = section.querySelector("[data-history-notes]");
      if (list && notes[key]) {
        while (list.firstChild) { list.removeChild(list.firstChild); }
        for (var n = 0; n < notes[key].length; n++) {
          var li = document.createElement("li");
          li.className = "muted";
          li.textContent = notes[key][n];
          list.appendChild(li);
        }
      }
    }
    var resolution = panel.querySelector("[data-history-resolution]");
    if (resolution && body.resolution_text) {
      resolution.textContent = body.resolution_text;
    }
    var nodata = panel.querySelector("[data-history-nodata]");
    if (nodata && body.has_data) {
      nodata.hidden = true;
    }
    panel.setAttribute("data-history-updated", String(Date.now()));
  }

  function start(panel) {
    var url = panel.getAttribute("data-history-url");
    var interval = parseInt(panel.getAttribute("data-history-interval") || "0", 10);
    if (!url || !interval || interval < 0) {
      return;
    }
    interval = Math.max(interval, MIN_INTERVAL_S) * 1000;
    var timer = null;
    var busy = false;

    function poll() {
      timer = null;
      if (document.hidden || busy) {
        return;
      }
      busy = true;
      fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } })
        .then(function (response) { return response.ok ? response.json() : null; })
        .then(function (body) { if (body) { apply(panel, body); } })
        .catch(function () { /* the next poll tries again */ })
        .then(function () {
          busy = false;
          schedule();
        });
    }

    function schedule() {
      if (timer === null && !document.hidden) {
        timer = window.setTimeout(poll, interval);
      }
    }

    document.addEventListener("visibilitychange", function () {
      if (document.hidden) {
        if (timer !== null) {
          window.clearTimeout(timer);
          timer = null;
        }
      } else if (timer === null && !busy) {
        poll();
      }
    });
    schedule();
  }

  function init() {
    var panels = document.querySelectorAll("[data-history-url]");
    for (var i = 0; i < panels.length; i++) {
      start(panels[i]);
    }
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", init);
  } else {
    init();
  }
})();
