/* Suanchi 算池 — compute-template editor: profile hints and a live YAML preview.
 * Posts the form's fields to the preview endpoint (validation only, nothing is saved) and shows
 * the returned YAML or the field errors. The form works without this script. */
(function () {
  "use strict";

  var form = document.getElementById("template-editor");
  if (!form || !window.fetch || !window.Suanchi) {
    return;
  }
  var text = window.SUANCHI_EDITOR_TEXT || {};
  var catalogNode = document.getElementById("editor-catalog");
  var catalog = catalogNode ? JSON.parse(catalogNode.textContent) : {};
  var previewUrl = form.getAttribute("data-preview-url");
  var templateId = form.getAttribute("data-template-id");
  var yamlBox = document.getElementById("preview-yaml");
  var errorList = document.getElementById("preview-errors");
  var statusLine = document.getElementById("preview-status");
  var cardFacts = document.getElementById("card-facts");
  var profileOptions = document.getElementById("profile-options");
  var fields = ["device_model", "name", "partition_profile", "memory_gib", "compute_share", "isolation",
    "max_instances", "description"];

  // The card's facts belong under the device model select.
  var modelField = form.querySelector('[data-field="device_model"]');
  if (modelField && cardFacts) {
    modelField.appendChild(cardFacts);
  }

  function value(name) {
    var element = form.elements.namedItem(name);
    if (!element) {
      return "";
    }
    if (element instanceof RadioNodeList || (element.length && element[0] && element[0].type === "radio")) {
      for (var i = 0; i < element.length; i += 1) {
        if (element[i].checked) {
          return element[i].value;
        }
      }
      return "";
    }
    return element.value;
  }

  function payload() {
    var body = {};
    fields.forEach(function (name) {
      var raw = value(name);
      if (raw !== "" && raw !== null) {
        body[name] = raw;
      }
    });
    if (templateId) {
      body.id = templateId;
    }
    return body;
  }

  function setCode(content) {
    var code = document.createElement("code");
    code.textContent = content;
    yamlBox.replaceChildren(code);
  }

  function showErrors(errors) {
    errorList.replaceChildren();
    Object.keys(errors || {}).forEach(function (field) {
      (errors[field] || []).forEach(function (message) {
        var item = document.createElement("li");
        item.className = "field-error";
        var label = form.querySelector('[data-field="' + field + '"] label, [data-field="' + field + '"] legend');
        item.textContent = (label ? label.textContent.replace("*", "").trim() + ": " : "") + message;
        errorList.appendChild(item);
      });
    });
  }

  function describeCard() {
    var card = catalog[value("device_model")];
    profileOptions.replaceChildren();
    if (!card) {
      cardFacts.textContent = "";
      return;
    }
    var parts = [];
    parts.push(card.memory_gib === null ? text.cardUnknown : text.card.replace("{memory}", card.memory_gib));
    if (card.profiles.length) {
      parts.push(text.profiles.replace("{names}", card.profiles.map(function (p) { return p.name; }).join(", ")));
    } else {
      parts.push(text.noProfiles);
    }
    cardFacts.textContent = parts.join(" ");
    card.profiles.forEach(function (profile) {
      var option = document.createElement("option");
      option.value = profile.name;
      var memory = profile.memory_gib === null ? "" : profile.memory_gib + " GiB, ";
      option.label = profile.kind.toUpperCase() + " · " + memory + profile.share + " %, × " + profile.max_instances;
      profileOptions.appendChild(option);
    });
  }

  form.addEventListener("change", function (event) {
    if (event.target && event.target.name === "device_model") {
      describeCard();
    }
  });
  describeCard();
  window.Suanchi.livePreview({
    form: form,
    url: previewUrl,
    delay: 300,
    body: payload,
    onStart: function () {
      statusLine.textContent = text.checking;
    },
    onResult: function (data) {
      showErrors(data.errors);
      if (data.valid) {
        statusLine.textContent = text.valid;
        setCode(data.yaml);
      } else {
        statusLine.textContent = text.invalid;
      }
      yamlBox.classList.toggle("is-stale", !data.valid);
    },
    onFailure: function () {
      statusLine.textContent = text.failed;
    }
  });
})();
