/* Suanchi 算池 — live pages (issue 21): the job page, the job list, the fleet and a gray batch update
 * their badges and counts without a reload.
 *
 * A container with data-live-url (a JSON endpoint of the site) is polled every data-live-interval
 * seconds (default 5). The answer is {"fields": {key: {"text", "tone", "value"}}}: every element
 * inside with data-live-key="key" gets the text, and a badge its tone (badge--<tone>) and data-value.
 * data-live-ids (an attribute of the container) is appended as ?ids=; the job list lists its rows.
 * Polling stops while the tab is hidden and resumes at once when it is shown again. No inline
 * script: the Content-Security-Policy allows only scripts served from the site. */
(function () {
  "use strict";

  var DEFAULT_INTERVAL_S = 5;
  var MIN_INTERVAL_S = 2;

  function apply(box, fields) {
    var els = box.querySelectorAll("[data-live-key]");
    for (var i = 0; i < els.length; i++) {
      var el = els[i];
      var field = fields[el.getAttribute("data-live-key")];
      if (!field) {
        continue;
      }
      if (field.text != null && el.textContent !== String(field.text)) {
        el.textContent = String(field.text);
      }
      if (field.value != null) {
        el.setAttribute("data-value", String(field.value));
      }
      if (field.tone && el.classList.contains("badge")) {
        var keep = [];
        for (var c = 0; c < el.classList.length; c++) {
          if (el.classList[c].indexOf("badge--") !== 0) {
            keep.push(el.classList[c]);
          }
        }
        keep.push("badge--" + field.tone);
        el.className = keep.join(" ");
      }
    }
    box.setAttribute("data-live-updated", new Date().toISOString());
  }

  function follow(box) {
    var url = box.getAttribute("data-live-url");
    var ids = box.getAttribute("data-live-ids");
    if (ids) {
      url += (url.indexOf("?") < 0 ? "?" : "&") + "ids=" + encodeURIComponent(ids);
    }
    var seconds = parseFloat(box.getAttribute("data-live-interval")) || DEFAULT_INTERVAL_S;
    var delay = Math.max(seconds, MIN_INTERVAL_S) * 1000;
    var timer = null;
    var busy = false;

    function schedule(ms) {
      if (timer === null && !document.hidden) {
        timer = window.setTimeout(poll, ms);
      }
    }

    function poll() {
      timer = null;
      if (document.hidden || busy) {
        return;
      }
      busy = true;
      fetch(url, {credentials: "same-origin", headers: {"Accept": "application/json"}, cache: "no-store"})
        .then(function (r) {
          if (!r.ok) {
            throw new Error("HTTP " + r.status);
          }
          return r.json();
        })
        .then(function (data) {
          apply(box, data.fields || {});
          busy = false;
          schedule(delay);
        })
        .catch(function () {
          busy = false;
          schedule(delay * 3); // the server is busy or away: back off
        });
    }

    document.addEventListener("visibilitychange", function () {
      if (document.hidden) {
        if (timer !== null) {
          window.clearTimeout(timer);
          timer = null;
        }
      } else {
        schedule(0); // shown again: catch up at once
      }
    });
    schedule(delay);
  }

  function init() {
    if (!window.fetch) {
      return;
    }
    var boxes = document.querySelectorAll("[data-live-url]");
    for (var i = 0; i < boxes.length; i++) {
      if (!boxes[i].getAttribute("data-live-bound")) {
        boxes[i].setAttribute("data-live-bound", "1");
        follow(boxes[i]);
      }
    }
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", init);
  } else {
    init();
  }
})();
