/* Suanchi 算池 — the job page's "Pods, events and log" panel (issue 21).
 *
 * The page arrives without it (asking a cluster can take seconds); this fetches the fragment named by
 * data-pod-url into [data-pod-body] once the page is shown, and again every data-pod-refresh seconds
 * while the fragment says the job is still active (its own data-pod-refresh). The log keeps its
 * scroll position at the bottom when it was there. When live.js replaces the job's timeline (its state
 * changed) the fragment is fetched again at once. Polling stops while the tab is hidden. No inline
 * script: the Content-Security-Policy allows only scripts served from the site. */
(function () {
  "use strict";

  var MIN_REFRESH_S = 5;

  function follow(panel) {
    var url = panel.getAttribute("data-pod-url");
    var body = panel.querySelector("[data-pod-body]");
    if (!url || !body) {
      return;
    }
    var timer = null;
    var busy = false;
    var refresh = parseFloat(panel.getAttribute("data-pod-refresh")) || 0;

    function schedule(seconds) {
      if (timer === null && seconds > 0 && !document.hidden) {
        timer = window.setTimeout(load, Math.max(seconds, MIN_REFRESH_S) * 1000);
      }
    }

    function load() {
      timer = null;
      busy = true;
      var old = body.querySelector("#job-pod-log");
      var atBottom = !old || old.scrollTop + old.clientHeight >= old.scrollHeight - 4;
      fetch(url, {credentials: "same-origin", headers: {"Accept": "text/html"}, cache: "no-store"})
        .then(function (r) {
          if (!r.ok) {
            throw new Error("HTTP " + r.status);
          }
          return r.text();
        })
        .then(function (html) {
          var doc = new DOMParser().parseFromString(html, "text/html");
          var fresh = doc.getElementById("job-pod-content");
          if (!fresh) {
            throw new Error("no fragment");
          }
          body.replaceChildren(document.importNode(fresh, true));
          var log = body.querySelector("#job-pod-log");
          if (log && atBottom) {
            log.scrollTop = log.scrollHeight;
          }
          busy = false;
          panel.setAttribute("data-pod-updated", new Date().toISOString());
          refresh = parseFloat(fresh.getAttribute("data-pod-refresh")) || 0;
          schedule(refresh);
        })
        .catch(function () {
          busy = false;
          panel.setAttribute("data-pod-failed", "1");
          schedule((refresh || MIN_REFRESH_S) * 3); // the server is busy or away: back off
        });
    }

    document.addEventListener("visibilitychange", function () {
      if (document.hidden) {
        if (timer !== null) {
          window.clearTimeout(timer);
          timer = null;
        }
      } else if (refresh > 0) {
        schedule(MIN_REFRESH_S);
      }
    });
    // The job's timeline changed (static/js/live.js replaced it: a new state, a new attempt): the
    // pods are asked again at once, so a job that just reached its cluster shows them (issue 29 §2).
    document.addEventListener("live:replaced", function (e) {
      var name = (e.detail && e.detail.name) || "";
      if (busy || document.hidden || !/-timeline$/.test(name)) {
        return;
      }
      if (timer !== null) {
        window.clearTimeout(timer);
        timer = null;
      }
      load();
    });
    load();
  }

  function init() {
    if (!window.fetch || !window.DOMParser) {
      return;
    }
    var panels = document.querySelectorAll("[data-pod-url]");
    for (var i = 0; i < panels.length; i++) {
      follow(panels[i]);
    }
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", init);
  } else {
    init();
  }
})();
