/* Suanchi 算池 — translated strings for a page's script, without an inline <script>.
 * <div hidden data-page-text="NAME" data-some-key="…"> becomes window.NAME = {someKey: "…"}
 * (dataset turns data-some-key into someKey). Load it before the script that reads window.NAME. */
(function () {
  "use strict";
  var holders = document.querySelectorAll("[data-page-text]");
  for (var i = 0; i < holders.length; i++) {
    var text = {};
    var data = holders[i].dataset;
    for (var key in data) {
      if (Object.prototype.hasOwnProperty.call(data, key) && key !== "pageText") {
        text[key] = data[key];
      }
    }
    window[data.pageText] = text;
  }
})();
