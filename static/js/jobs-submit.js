/* Suanchi 算池 — job submit form: show the fields of the chosen request kind and a live preview of
 * where the request could run now. The preview posts the form to the preview endpoint (nothing is
 * saved) and renders its answer beside the form. The form works without this script: the server
 * validates everything on submit. No external libraries. */
(function () {
  "use strict";

  var form = document.getElementById("job-submit-form");
  if (!form || !window.fetch || !window.FormData || !window.Suanchi) {
    return;
  }
  var text = window.SUANCHI_JOBS_TEXT || {};
  var previewUrl = form.getAttribute("data-preview-url");
  var statusLine = document.getElementById("preview-status");
  var errorList = document.getElementById("preview-errors");
  var summary = document.getElementById("preview-summary");
  var requestBox = document.getElementById("preview-request");
  var cuBox = document.getElementById("preview-cu");
  var costBox = document.getElementById("preview-cost");
  var quotaBox = document.getElementById("preview-quota");
  var feasibleBox = document.getElementById("preview-feasible");
  var nowBox = document.getElementById("preview-now");
  var alternativesBox = document.getElementById("preview-alternatives");
  var SHOWN_ALTERNATIVES = 2;

  document.documentElement.classList.add("js-jobs");

  // ---- show / hide the fields of the chosen request kind ---------------------------------------

  function requestKind() {
    var checked = form.querySelector('input[name="request_kind"]:checked');
    return checked ? checked.value : "";
  }

  function toggleKindFields() {
    var kind = requestKind();
    form.querySelectorAll("[data-kinds]").forEach(function (wrapper) {
      var kinds = wrapper.getAttribute("data-kinds").split(/\s+/);
      var show = kinds.indexOf(kind) !== -1;
      wrapper.hidden = !show;
      wrapper.querySelectorAll("input, select, textarea").forEach(function (input) {
        input.disabled = !show;
      });
    });
  }

  // ---- small DOM helpers -----------------------------------------------------------------------

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

  function fieldLabel(name) {
    if (name === "__all__") {
      return "";
    }
    var label = form.querySelector('[data-field="' + name + '"] label, [data-field="' + name + '"] legend');
    return label ? label.textContent.replace("*", "").trim() : name;
  }

  function showErrors(errors) {
    errorList.replaceChildren();
    Object.keys(errors || {}).forEach(function (name) {
      (errors[name] || []).forEach(function (message) {
        var label = fieldLabel(name);
        errorList.appendChild(el("li", "field-error", (label ? label + ": " : "") + message));
      });
    });
  }

  function mib(value) {
    if (!value) {
      return "";
    }
    if (value >= 1024) {
      return (Math.round((value / 1024) * 10) / 10) + " GiB";
    }
    return value + " MiB";
  }

  function cardText(card) {
    var parts = [card.label];
    if (card.whole) {
      parts.push(text.whole);
    } else {
      parts.push(mib(card.memory_mib) + ", " + card.compute_pct + " % " + text.share);
    }
    return parts.join(" · ");
  }

  // ---- rendering the answer --------------------------------------------------------------------

  function renderAlternative(alt, count) {
    var box = el("article", "preview-alt" + (alt.chosen ? " preview-alt--chosen" : "") +
      (alt.placed ? "" : " preview-alt--waiting"));
    var head = el("header", "preview-alt__head");
    var title = count > 1 ? text.option.replace("{n}", String(alt.index + 1)) : "";
    if (alt.models && alt.models.length) {
      title = (title ? title + " · " : "") + alt.models.join(", ");
    }
    if (title) {
      head.appendChild(el("strong", null, title));
    }
    if (alt.compute_units) {
      head.appendChild(el("span", "muted", alt.compute_units + " CU/h"));
    }
    var badge = el("span", "badge " + (alt.placed ? "badge--ok" : "badge--warn"), alt.placed ? text.fits : text.noFit);
    head.appendChild(badge);
    if (alt.chosen && count > 1) {
      head.appendChild(el("span", "badge badge--accent", text.used));
    }
    box.appendChild(head);

    if (alt.placed) {
      box.appendChild(el("h3", "preview-alt__sub", text.chosen));
      var nodes = el("ul", "preview-nodes");
      alt.nodes.forEach(function (part) {
        var item = el("li");
        var name = el("strong", "mono", part.node);
        item.appendChild(name);
        if (alt.nodes.length > 1) {
          item.appendChild(document.createTextNode(" (" + text.replica + " " + part.replica + ")"));
        }
        var cards = el("ul", "chips");
        part.cards.forEach(function (card) {
          var chip = el("li", "chip", cardText(card));
          if (card.uuid) {
            chip.title = card.uuid;
          }
          cards.appendChild(chip);
        });
        item.appendChild(cards);
        nodes.appendChild(item);
      });
      box.appendChild(nodes);
      if (alt.candidates && alt.candidates.length) {
        box.appendChild(el("h3", "preview-alt__sub", text.candidates));
        var list = el("ol", "preview-candidates");
        alt.candidates.forEach(function (candidate) {
          var item = el("li");
          item.appendChild(el("span", "mono", candidate.node));
          item.appendChild(el("span", "muted", " " + text.score + " " + (candidate.score_text || candidate.score.join(" · "))));
          list.appendChild(item);
        });
        box.appendChild(list);
      }
    } else {
      box.appendChild(el("h3", "preview-alt__sub", text.why));
      box.appendChild(el("p", "preview-explanation", alt.explanation));
      if (alt.rejections && alt.rejections.length) {
        var reasons = el("ul", "preview-rejections");
        alt.rejections.forEach(function (rejection) {
          var item = el("li");
          item.appendChild(el("span", "mono", rejection.node));
          item.appendChild(document.createTextNode(": " + rejection.reason));
          reasons.appendChild(item);
        });
        box.appendChild(reasons);
      }
    }
    return box;
  }

  // ---- the benchmark library's recommendation (profile requests) -------------------------------

  var recoBox = document.getElementById("preview-recommendation");
  var recoList = document.getElementById("preview-recommendation-list");
  var recoRule = document.getElementById("preview-recommendation-rule");

  function setChoice(name, value) {
    var input = form.querySelector('[name="' + name + '"]');
    if (input) {
      input.value = value;
    }
  }

  // "Use this": turn the profile request into the concrete request the library recommended.
  function useOption(option) {
    var kind = option.template ? "template" : "whole_cards";
    var radio = form.querySelector('input[name="request_kind"][value="' + kind + '"]');
    if (!radio) {
      return;
    }
    radio.checked = true;
    toggleKindFields();
    if (option.template_id) {
      setChoice("template", option.template_id);
    } else {
      setChoice("device_model", option.device_model_id);
    }
    setChoice("count", String(option.instances));
    form.dispatchEvent(new Event("change", { bubbles: true }));
  }

  function renderRecommendation(reco) {
    if (!recoBox) {
      return;
    }
    recoList.replaceChildren();
    recoBox.hidden = !reco;
    if (!reco) {
      return;
    }
    recoRule.textContent = (reco.rules || []).join("; ");
    reco.options.forEach(function (option) {
      var item = el("li", option.no_data ? "recommendation is-empty" : "recommendation");
      item.appendChild(el("strong", null, option.option));
      if (option.no_data || !option.cu_per_hour) {
        item.appendChild(el("span", "muted", " — " + (text.noData || "no data") + (option.reason ? " (" + option.reason + ")" : "")));
        recoList.appendChild(item);
        return;
      }
      var parts = [option.fits_text || String(option.instances), option.cu_per_hour + " CU/h"];
      if (option.money_per_hour) {
        parts.push(option.money_per_hour + " " + option.currency + "/h");
      }
      parts.push(option.cu_hours_per_million + " CU·h " + (text.perMillion || "per million"));
      item.appendChild(el("span", null, " — " + parts.join(", ")));
      var evidence = (text.evidence || "{n}").replace("{n}", String(option.evidence.count));
      if (option.basis === "estimated") {
        evidence += ", " + (text.estimated || "estimated");
      }
      if (option.evidence.synthetic) {
        evidence += ", " + (text.synthetic || "synthetic");
      }
      item.appendChild(el("span", "muted", " (" + evidence + ")"));
      (option.notes || []).forEach(function (note) {
        item.appendChild(el("span", "badge badge--warn", note));
      });
      var use = el("button", "btn btn--small", text.use || "Use this");
      use.type = "button";
      use.addEventListener("click", function () { useOption(option); });
      item.appendChild(document.createTextNode(" "));
      item.appendChild(use);
      recoList.appendChild(item);
    });
  }

  function render(data) {
    renderRecommendation(data.recommendation || null);
    showErrors(data.errors);
    statusLine.textContent = data.valid ? text.valid : text.invalid;
    alternativesBox.replaceChildren();
    if (!data.request) {
      summary.hidden = true;
      return;
    }
    summary.hidden = false;
    requestBox.textContent = data.request;
    cuBox.textContent = data.compute_units_per_hour ? data.compute_units_per_hour + " CU" : "—";
    if (costBox) {
      costBox.textContent = data.cost_per_hour || "—";
    }
    if (quotaBox) {
      quotaBox.textContent = data.quota_left || "—";
    }
    if (data.feasible) {
      feasibleBox.textContent = data.feasible.ok ? text.yes : text.no + " — " + data.feasible.reason;
      feasibleBox.className = data.feasible.ok ? "text-ok" : "text-bad";
    }
    nowBox.textContent = data.placed_now ? text.nowYes : text.nowNo;
    nowBox.className = data.placed_now ? "text-ok" : "text-warn";
    var alternatives = data.alternatives || [];
    var count = alternatives.length;
    // The option the scheduler would use comes first; with many shapes (compute units) the ones
    // that do not fit now fold away.
    var first = alternatives.filter(function (alt) { return alt.chosen; });
    var rest = alternatives.filter(function (alt) { return !alt.chosen; });
    if (!first.length) {
      first = rest.slice(0, SHOWN_ALTERNATIVES);
      rest = rest.slice(SHOWN_ALTERNATIVES);
    }
    first.forEach(function (alt) {
      alternativesBox.appendChild(renderAlternative(alt, count));
    });
    if (rest.length) {
      var more = el("details", "preview-more");
      more.appendChild(el("summary", null, (text.more || "+{n}").replace("{n}", String(rest.length))));
      rest.forEach(function (alt) {
        more.appendChild(renderAlternative(alt, count));
      });
      alternativesBox.appendChild(more);
    }
  }

  // ---- talking to the server -------------------------------------------------------------------

  form.addEventListener("change", function (event) {
    if (event.target && event.target.name === "request_kind") {
      toggleKindFields();
    }
  });
  toggleKindFields();
  window.Suanchi.livePreview({
    form: form,
    url: previewUrl,
    delay: 400,
    acceptErrors: true,
    onStart: function () {
      statusLine.textContent = text.checking;
      alternativesBox.classList.add("is-stale");
    },
    onResult: function (data) {
      alternativesBox.classList.remove("is-stale");
      render(data);
    },
    onFailure: function () {
      alternativesBox.classList.remove("is-stale");
      statusLine.textContent = text.failed;
    }
  });
})();
