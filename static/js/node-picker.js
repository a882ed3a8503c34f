/* Suanchi 算池 — the gray batch form's node picker.
 * Searches the fleet a page at a time (GET data-search-url?q=&pool=&cluster=&status=&page=, answered by
 * apps.rollout.views.node_search), so it works the same for ten nodes or ten thousand. A ticked node
 * becomes a chip holding <input type="hidden" name="nodes" value="id">; the form posts those ids.
 * Without this script the form still works: node names, a pool or a label select the nodes. */
(function () {
  "use strict";

  var root = document.getElementById("node-picker");
  if (!root || !window.fetch) {
    return;
  }
  var text = window.SUANCHI_PICKER_TEXT || {};
  var ui = root.querySelector("[data-picker-ui]");
  var rows = root.querySelector("[data-picker-rows]");
  var count = root.querySelector("[data-picker-count]");
  var pageLabel = root.querySelector("[data-picker-page]");
  var prev = root.querySelector("[data-picker-prev]");
  var next = root.querySelector("[data-picker-next]");
  var pageAll = root.querySelector("[data-picker-page-all]");
  var picked = root.querySelector("[data-picker-picked]");
  var total = root.querySelector("[data-picker-total]");
  var query = root.querySelector("[data-picker-q]");
  var url = root.getAttribute("data-search-url");
  var state = { page: 1, pages: 1, results: [] };
  var timer = null;
  var serial = 0;

  function format(template, values) {
    return String(template || "").replace(/%\((\w+)\)s/g, function (_m, key) {
      return values[key] === undefined ? "" : String(values[key]);
    });
  }

  function el(tag, className, content) {
    var node = document.createElement(tag);
    if (className) {
      node.className = className;
    }
    if (content !== undefined && content !== null) {
      node.textContent = content;
    }
    return node;
  }

  function isPicked(id) {
    return !!picked.querySelector('[data-node-id="' + id + '"]');
  }

  function updateTotal() {
    total.textContent = String(picked.querySelectorAll("[data-node-id]").length);
  }

  function pick(node) {
    if (isPicked(node.id)) {
      return;
    }
    var chip = el("li", "chip");
    chip.setAttribute("data-node-id", node.id);
    var input = document.createElement("input");
    input.type = "hidden";
    input.name = "nodes";
    input.value = node.id;
    chip.appendChild(input);
    chip.appendChild(document.createTextNode(node.name + " "));
    var remove = el("button", "chip__remove", "×");
    remove.type = "button";
    remove.setAttribute("data-unpick", "");
    remove.setAttribute("aria-label", format(text.remove, { node: node.name }));
    chip.appendChild(remove);
    picked.appendChild(chip);
    updateTotal();
  }

  function unpick(id) {
    var chip = picked.querySelector('[data-node-id="' + id + '"]');
    if (chip) {
      chip.parentNode.removeChild(chip);
    }
    var box = rows.querySelector('input[data-pick="' + id + '"]');
    if (box) {
      box.checked = false;
    }
    updateTotal();
  }

  function render() {
    rows.textContent = "";
    state.results.forEach(function (node) {
      var tr = el("tr");
      var cell = el("td");
      var box = document.createElement("input");
      box.type = "checkbox";
      box.setAttribute("data-pick", node.id);
      box.setAttribute("aria-label", format(text.pick, { node: node.name }));
      box.checked = isPicked(node.id);
      box.addEventListener("change", function () {
        if (box.checked) {
          pick(node);
        } else {
          unpick(node.id);
        }
      });
      cell.appendChild(box);
      tr.appendChild(cell);
      tr.appendChild(el("td", "mono", node.name));
      tr.appendChild(el("td", "", node.cluster));
      tr.appendChild(el("td", "", node.pool || "—"));
      tr.appendChild(el("td", "", node.status));
      tr.appendChild(el("td", "num", String(node.cards)));
      tr.appendChild(el("td", node.gray_batch ? "text-warn" : "muted", node.gray_batch || "—"));
      rows.appendChild(tr);
    });
    if (!state.results.length) {
      var empty = el("tr");
      var td = el("td", "muted", text.none);
      td.colSpan = 7;
      empty.appendChild(td);
      rows.appendChild(empty);
    }
    pageLabel.textContent = format(text.page, { page: state.page, pages: state.pages });
    prev.disabled = state.page <= 1;
    next.disabled = state.page >= state.pages;
    pageAll.disabled = !state.results.length;
  }

  function search(page) {
    var params = new URLSearchParams();
    params.set("q", query.value || "");
    root.querySelectorAll("[data-picker-filter]").forEach(function (select) {
      if (select.value) {
        params.set(select.getAttribute("data-picker-filter"), select.value);
      }
    });
    params.set("page", String(page || 1));
    var mine = ++serial;
    fetch(url + "?" + params.toString(), { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (response) {
        if (!response.ok) {
          throw new Error(String(response.status));
        }
        return response.json();
      })
      .then(function (data) {
        if (mine !== serial) {
          return; // a newer search answered first
        }
        state = { page: data.page, pages: data.pages, results: data.results || [] };
        count.textContent = format(text.count, { count: data.count });
        render();
      })
      .catch(function () {
        if (mine === serial) {
          count.textContent = text.failed;
        }
      });
  }

  picked.addEventListener("click", function (event) {
    var button = event.target.closest("[data-unpick]");
    if (button) {
      unpick(button.closest("[data-node-id]").getAttribute("data-node-id"));
    }
  });
  query.addEventListener("input", function () {
    clearTimeout(timer);
    timer = setTimeout(function () {
      search(1);
    }, 250);
  });
  query.addEventListener("keydown", function (event) {
    if (event.key === "Enter") {
      event.preventDefault(); // Enter searches; it does not submit the batch form
      clearTimeout(timer);
      search(1);
    }
  });
  root.querySelectorAll("[data-picker-filter]").forEach(function (select) {
    select.addEventListener("change", function () {
      search(1);
    });
  });
  prev.addEventListener("click", function () {
    search(state.page - 1);
  });
  next.addEventListener("click", function () {
    search(state.page + 1);
  });
  pageAll.addEventListener("click", function () {
    state.results.forEach(pick);
    render();
  });

  ui.hidden = false;
  search(1);
})();
