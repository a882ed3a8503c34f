/* Suanchi 算池 — live pages (issues 21 and 29 §2): the job page, the job list, the fleet and a gray
 * batch follow the server without a reload.
 *
 * A container with data-live-url (a JSON endpoint of the site) is polled every data-live-interval
 * seconds (default 5). The answer is {"fields": {key: {"text", "tone", "value"}}, "sections": {name:
 * {"version", "html"}}}:
 *  - every element with data-live-key="key" gets the text, and a badge its tone (badge--<tone>) and
 *    data-value;
 *  - every element with data-live-section="name" (its names are sent as ?sections=) gets the
 *    section's HTML as its new content when the version differs from its data-live-version. The HTML
 *    is rendered by the server from the page's own template partials (autoescaped) and parsed through
 *    a <template> element, so scripts in it never run. A section holding the focus in a text field,
 *    a text typed in and not sent, or an open <details> (a confirmation being filled in) waits for
 *    the next poll; checked boxes, the focused control and scroll positions inside a section survive
 *    a replacement. A replaced section fires "live:replaced" (bubbling; detail.name) for the page's
 *    other scripts.
 * The elements looked at are those inside the container, or the whole page when it has
 * data-live-scope="document". data-live-ids (an attribute of the container) is appended as ?ids=;
 * the job list lists its rows. Polling stops while the tab is hidden and resumes at once when it is
 * shown again. No inline script: the Content-Security-Policy allows only scripts served from the site. */
(function () {
  "use strict";

  var DEFAULT_INTERVAL_S = 5;
  var MIN_INTERVAL_S = 2;

  function scopeOf(box) {
    return box.getAttribute("data-live-scope") === "document" ? document : box;
  }

  function applyFields(scope, fields) {
    var els = scope.querySelectorAll("[data-live-key]");
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
  }

  var TYPING = /^(text|search|email|number|password|tel|url|date|datetime-local|time)$/;

  function isTyping(el) {
    var tag = el.tagName;
    return tag === "TEXTAREA" || tag === "SELECT" || el.isContentEditable ||
      (tag === "INPUT" && TYPING.test(el.type || "text"));
  }

  function hasEdits(el) {
    var fields = el.querySelectorAll("input, textarea");
    for (var i = 0; i < fields.length; i++) {
      if (isTyping(fields[i]) && fields[i].value !== fields[i].defaultValue) {
        return true; // typed in and not sent yet
      }
    }
    return false;
  }

  function controlKey(el) {
    if (el.id) {
      return "#" + el.id;
    }
    if (el.name) {
      return el.tagName + "|" + el.name + "|" + (el.value || "");
    }
    return null;
  }

  function findControl(root, key) {
    var all = root.querySelectorAll("[id], [name]");
    for (var i = 0; i < all.length; i++) {
      if (controlKey(all[i]) === key) {
        return all[i];
      }
    }
    return null;
  }

  function replaceSection(el, section) {
    if (!section || typeof section.html !== "string" || el.getAttribute("data-live-version") === section.version) {
      return;
    }
    var active = document.activeElement;
    var focused = active && active !== document.body && el.contains(active) ? active : null;
    if ((focused && isTyping(focused)) || el.querySelector("details[open]") || hasEdits(el)) {
      return; // someone is writing or confirming here: the next poll tries again
    }
    var checked = [];
    var boxes = el.querySelectorAll("input[type=checkbox]:checked, input[type=radio]:checked");
    for (var i = 0; i < boxes.length; i++) {
      checked.push(controlKey(boxes[i]));
    }
    var scrolled = [];
    var panes = el.querySelectorAll(".table-wrap, pre");
    for (var j = 0; j < panes.length; j++) {
      scrolled.push([panes[j].scrollLeft, panes[j].scrollTop]);
    }
    var focusKey = focused ? controlKey(focused) : null;
    var template = document.createElement("template");
    template.innerHTML = section.html;
    el.replaceChildren(template.content);
    for (var k = 0; k < checked.length; k++) {
      var again = checked[k] && findControl(el, checked[k]);
      if (again) {
        again.checked = true;
      }
    }
    var fresh = el.querySelectorAll(".table-wrap, pre");
    for (var m = 0; m < fresh.length && m < scrolled.length; m++) {
      fresh[m].scrollLeft = scrolled[m][0];
      fresh[m].scrollTop = scrolled[m][1];
    }
    if (focusKey) {
      var target = findControl(el, focusKey);
      if (target) {
        target.focus({preventScroll: true});
      }
    }
    el.setAttribute("data-live-version", section.version);
    el.dispatchEvent(new CustomEvent("live:replaced", {bubbles: true, detail: {name: el.getAttribute("data-live-section")}}));
  }

  function apply(box, data) {
    var scope = scopeOf(box);
    var sections = data.sections || {};
    var els = scope.querySelectorAll("[data-live-section]");
    for (var i = 0; i < els.length; i++) {
      replaceSection(els[i], sections[els[i].getAttribute("data-live-section")]);
    }
    applyFields(scope, data.fields || {});
    box.setAttribute("data-live-updated", new Date().toISOString());
  }

  function follow(box) {
    var url = box.getAttribute("data-live-url");
    var ids = box.getAttribute("data-live-ids");
    if (ids) {
      url += (url.indexOf("?") < 0 ? "?" : "&") + "ids=" + encodeURIComponent(ids);
    }
    var names = [];
    var sectionEls = scopeOf(box).querySelectorAll("[data-live-section]");
    for (var n = 0; n < sectionEls.length; n++) {
      names.push(sectionEls[n].getAttribute("data-live-section"));
    }
    if (names.length) {
      url += (url.indexOf("?") < 0 ? "?" : "&") + "sections=" + encodeURIComponent(names.join(","));
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
          apply(box, data || {});
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
