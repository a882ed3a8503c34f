/* Suanchi 算池 — small progressive enhancements; every page works without this file. */
(function () {
  "use strict";
  document.documentElement.classList.add("js");

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
