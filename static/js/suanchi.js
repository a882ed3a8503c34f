/* Suanchi 算池 — small progressive enhancements; every page works without this file. */
(function () {
  "use strict";
  document.documentElement.classList.add("js");

  var Suanchi = window.Suanchi = window.Suanchi || {};

  /* A live preview of a form: POST it to `url` now and again `delay` ms after each edit, and hand the
   * JSON answer to `onResult`; only the answer to the latest request counts. `body()` gives a FormData
   * or a plain object (sent as JSON); the default is the form's fields. With `acceptErrors` a non-2xx
   * answer that carries `errors` counts as an answer. `onStart` runs as each request goes out,
   * `onFailure` when the latest one fails. Returns {refresh, schedule}. */
  Suanchi.livePreview = function (options) {
    var form = options.form;
    var timer = null;
    var sequence = 0;

    function refresh() {
      var mine = ++sequence;
      if (options.onStart) {
        options.onStart();
      }
      var token = form.elements.namedItem("csrfmiddlewaretoken");
      var headers = {"Accept": "application/json", "X-CSRFToken": token ? token.value : ""};
      var body = options.body ? options.body() : new FormData(form);
      if (!(body instanceof FormData)) {
        headers["Content-Type"] = "application/json";
        body = JSON.stringify(body);
      }
      fetch(options.url, {
        method: "POST",
        credentials: "same-origin",
        headers: headers,
        body: body
      }).then(function (response) {
        if (!response.ok && !options.acceptErrors) {
          throw new Error("HTTP " + response.status);
        }
        return response.json().then(function (data) {
          if (!response.ok && !(data && data.errors)) {
            throw new Error("HTTP " + response.status);
          }
          return data;
        });
      }).then(function (data) {
        if (mine === sequence) {
          options.onResult(data);
        }
      }).catch(function () {
        if (mine === sequence && options.onFailure) {
          options.onFailure();
        }
      });
    }

    function schedule() {
      window.clearTimeout(timer);
      timer = window.setTimeout(refresh, options.delay || 300);
    }

    form.addEventListener("input", schedule);
    form.addEventListener("change", schedule);
    refresh();
    return {refresh: refresh, schedule: schedule};
  };

  // The language select submits its form on change (the button remains for keyboard / no-JS use).
  document.querySelectorAll("select[data-autosubmit]").forEach(function (select) {
    select.addEventListener("change", function () {
      if (select.form) {
        select.form.submit();
      }
    });
  });

  // The user menu closes on Escape and on a click outside it.
  var menus = document.querySelectorAll("details.usermenu");
  document.addEventListener("keydown", function (event) {
    if (event.key !== "Escape") {
      return;
    }
    menus.forEach(function (menu) {
      if (menu.open) {
        menu.open = false;
        menu.querySelector("summary").focus();
      }
    });
  });
  document.addEventListener("click", function (event) {
    menus.forEach(function (menu) {
      if (menu.open && !menu.contains(event.target)) {
        menu.open = false;
      }
    });
  });
})();
