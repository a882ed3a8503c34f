/* Suanchi 算池 — follow a background run (templates/core/_run_progress.html).
 *
 * Polls the box's data-url (/runs/<id>/, JSON) while the run is queued or running, updates the bar
 * and the texts, and reloads the page once the run is over so the page shows its result. No inline
 * script: the page's Content-Security-Policy allows only scripts served from the site. */
(function () {
  "use strict";

  var ACTIVE = {queued: true, running: true};

  function field(box, name) {
    return box.querySelector('[data-run-field="' + name + '"]');
  }

  function setText(box, name, value) {
    var el = field(box, name);
    if (el) {
      el.textContent = value == null ? "" : String(value);
    }
  }

  function render(box, p) {
    var bar = field(box, "bar");
    if (bar) {
      bar.value = p.percent;
      bar.textContent = p.percent + " %";
    }
    setText(box, "status_label", p.status_label);
    setText(box, "message", p.message);
    setText(box, "count", p.total ? p.done + "/" + p.total : "");
    setText(box, "error", p.error);
    box.setAttribute("data-status", p.status);
  }

  function follow(box) {
    var url = box.getAttribute("data-url");
    function poll() {
      fetch(url, {credentials: "same-origin", headers: {"Accept": "application/json"}, cache: "no-store"})
        .then(function (r) {
          if (!r.ok) {
            throw new Error("HTTP " + r.status);
          }
          return r.json();
        })
        .then(function (p) {
          render(box, p);
          if (ACTIVE[p.status]) {
            window.setTimeout(poll, 1000);
          } else {
            window.location.reload();
          }
        })
        .catch(function () {
          window.setTimeout(poll, 3000);
        });
    }
    window.setTimeout(poll, 500);
  }

  function init() {
    if (!window.fetch) {
      return;
    }
    var boxes = document.querySelectorAll("[data-run-progress]");
    for (var i = 0; i < boxes.length; i++) {
      var box = boxes[i];
      if (box.getAttribute("data-run-bound")) {
        continue; // the partial is included more than once: follow each box once
      }
      box.setAttribute("data-run-bound", "1");
      var bar = field(box, "bar");
      if (bar) {
        bar.style.width = "100%"; // set from script: a style attribute would need 'unsafe-inline'
      }
      if (ACTIVE[box.getAttribute("data-status")]) {
        follow(box);
      }
    }
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", init);
  } else {
    init();
  }
})();
