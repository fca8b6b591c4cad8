// emq dashboard: live counts over server-sent events, and the confirmation dialog.
// No framework, no build step; the pages work without it (actions post directly).
(function () {
  "use strict";

  // --- live counts: <body data-live="*"> (every queue) or "NAME" (one queue) ---
  function startLive() {
    var live = document.body.getAttribute("data-live");
    if (!live || !window.EventSource) return;
    var url = live === "*" ? "/events" : "/events?queue=" + encodeURIComponent(live);
    var source = new EventSource(url);
    source.addEventListener("counts", function (ev) {
      var data;
      try { data = JSON.parse(ev.data); } catch (e) { return; }
      Object.keys(data).forEach(function (name) {
        var rows = document.querySelectorAll("tr[data-queue]");
        for (var i = 0; i < rows.length; i++) {
          if (rows[i].getAttribute("data-queue") === name) update(rows[i], data[name]);
        }
      });
    });
    source.addEventListener("charts", function (ev) {
      var data;
      try { data = JSON.parse(ev.data); } catch (e) { return; }
      var rows = document.querySelectorAll("tr[data-queue]");
      for (var i = 0; i < rows.length; i++) {
        var lines = data[rows[i].getAttribute("data-queue")];
        if (lines) drawCharts(rows[i], lines);
      }
    });
    window.addEventListener("pagehide", function () { source.close(); });
  }

  function update(row, counts) {
    Object.keys(counts).forEach(function (loc) {
      if (loc === "paused") return;
      var cell = row.querySelector('[data-count="' + loc + '"]');
      var text = String(counts[loc]);
      if (cell && cell.textContent !== text) {
        cell.textContent = text;
        cell.classList.remove("changed");
        void cell.offsetWidth; // restart the highlight
        cell.classList.add("changed");
      }
    });
    if ("paused" in counts) {
      row.setAttribute("data-paused", counts.paused ? "1" : "0");
      var state = row.querySelector("[data-state]");
      if (state) state.textContent = counts.paused ? "paused" : "running";
    }
  }

  function drawCharts(row, lines) {
    ["through", "failing"].forEach(function (kind) {
      var cell = row.querySelector('[data-chart="' + kind + '"]');
      if (!cell) return;
      var line = cell.querySelector("polyline");
      var svg = cell.querySelector("svg");
      var figure = cell.querySelector(".figure");
      if (line) line.setAttribute("points", lines[kind + "_points"]);
      if (figure) figure.textContent = lines[kind];
      if (svg) svg.setAttribute("aria-label", svg.getAttribute("data-label") + ": " + lines[kind]);
    });
  }

  // --- confirmation: a form with data-ask opens <dialog id="confirm"> first ---
  function startConfirm() {
    var dialog = document.getElementById("confirm");
    if (!dialog || typeof dialog.showModal !== "function") return;
    var pending = null;
    var opener = null;
    document.addEventListener("submit", function (ev) {
      var form = ev.target;
      if (!(form instanceof HTMLFormElement) || !form.hasAttribute("data-ask")) return;
      ev.preventDefault();
      pending = form;
      opener = document.activeElement;
      document.getElementById("confirm-text").textContent = form.getAttribute("data-ask");
      dialog.showModal();
    });
    dialog.querySelector("[data-confirm]").addEventListener("click", function () {
      var form = pending;
      pending = null;
      dialog.close();
      if (form) HTMLFormElement.prototype.submit.call(form);
    });
    dialog.querySelector("[data-cancel]").addEventListener("click", function () {
      dialog.close();
    });
    dialog.addEventListener("close", function () {
      pending = null;
      if (opener && opener.focus) opener.focus();
    });
  }

  // --- a filter box: <input data-filter="ROWS SELECTOR"> hides rows whose data-queue lacks it ---
  function startFilter() {
    var inputs = document.querySelectorAll("input[data-filter]");
    Array.prototype.forEach.call(inputs, function (input) {
      input.addEventListener("input", function () {
        var text = input.value.trim().toLowerCase();
        var rows = document.querySelectorAll(input.getAttribute("data-filter"));
        Array.prototype.forEach.call(rows, function (row) {
          var name = (row.getAttribute("data-queue") || "").toLowerCase();
          row.hidden = text !== "" && name.indexOf(text) === -1;
        });
      });
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    startLive();
    startConfirm();
    startFilter();
  });
})();
