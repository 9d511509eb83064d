// conductor-mcp run viewer: loads a step's exact messages when it is opened, opens the step a link points at,
// and keeps a running run's page current from the server's events (no polling). Everything it inserts is
// HTML the server rendered and escaped; the Content-Security-Policy allows this file and nothing inline.
(function () {
  "use strict";

  function loadMessages(step) {
    var box = step.querySelector(":scope > .step-body > .messages");
    if (!box || box.dataset.loaded) return;
    box.dataset.loaded = "1";
    fetch(box.dataset.src, { credentials: "same-origin" })
      .then(function (r) { return r.ok ? r.text() : Promise.reject(new Error("HTTP " + r.status)); })
      .then(function (html) { box.innerHTML = html; })
      .catch(function (err) { box.dataset.loaded = ""; box.textContent = "could not load the messages: " + err.message; });
  }

  function wire(root) {
    root.querySelectorAll("details.step").forEach(function (step) {
      step.addEventListener("toggle", function () { if (step.open) loadMessages(step); });
      if (step.open) loadMessages(step);
    });
  }

  function openTarget() {
    var id = decodeURIComponent(location.hash.slice(1));
    var el = id && document.getElementById(id);
    for (var node = el; node; node = node.parentElement) {
      if (node.tagName === "DETAILS") node.open = true;
    }
    if (el) el.scrollIntoView();
  }

  function live(main, url) {
    var body = document.getElementById("run-body");
    var busy = false, again = false;
    function refresh() {
      if (busy) { again = true; return; }
      busy = true;
      fetch(location.pathname + "?part=body", { credentials: "same-origin" })
        .then(function (r) { return r.ok ? r.text() : Promise.reject(new Error("HTTP " + r.status)); })
        .then(function (html) {
          var open = Array.prototype.map.call(body.querySelectorAll("details[open][id]"), function (d) { return d.id; });
          body.innerHTML = html;
          open.forEach(function (id) { var d = document.getElementById(id); if (d) d.open = true; });
          wire(body);
        })
        .catch(function () { /* the next event retries */ })
        .finally(function () { busy = false; if (again) { again = false; refresh(); } });
    }
    var source = new EventSource(url);
    source.addEventListener("progress", function (e) {
      var doc = JSON.parse(e.data);
      if (doc.kind !== "heartbeat") refresh();
    });
    source.addEventListener("end", function () { source.close(); main.dataset.live = ""; refresh(); });
  }

  document.addEventListener("DOMContentLoaded", function () {
    var main = document.querySelector("main");
    wire(document);
    openTarget();
    window.addEventListener("hashchange", openTarget);
    if (main && main.dataset.live) live(main, main.dataset.live);
  });
})();
