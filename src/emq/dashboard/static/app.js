// emq dashboard: live counts over server-sent events, the confirmation dialog, the queue
// filter box; on the dead letters a bulk move's progress polled from /bulk/<op> (and the
// groups redrawn when it is done), and the workers table refreshed every 3 s.
// No framework, no build step; the pages work without it (actions post directly; reload a
// page to see the latest figures).
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
      var scale = cell.querySelector("[data-scale]");
      var top = lines[kind + "_max"] || "";
      if (line) line.setAttribute("points", lines[kind + "_points"]);
      if (figure) figure.textContent = lines[kind];
      if (scale) scale.textContent = top;
      if (svg) {
        svg.setAttribute("aria-label", svg.getAttribute("data-label") + ": " + lines[kind] +
          (top ? " (" + top + ")" : ""));
      }
    });
  }

  // --- confirmation: a form with data-ask opens <dialog id="confirm"> first; its buttons say
  // what they do: data-yes on the form names the one that goes ahead ("Cancel job"), data-no
  // the one that backs out ("Keep running") ---
  function startConfirm() {
    var dialog = document.getElementById("confirm");
    if (!dialog || typeof dialog.showModal !== "function") return;
    var pending = null;
    var opener = null;
    var yes = dialog.querySelector("[data-confirm]");
    var no = dialog.querySelector("[data-cancel]");
    var yesText = yes.textContent;
    var noText = no.textContent;
    document.addEventListener("submit", function (ev) {
      var form = ev.target;
      if (!(form instanceof HTMLFormElement) || !form.hasAttribute("data-ask")) return;
      ev.preventDefault();
      pending = form;
      opener = document.activeElement;
      document.getElementById("confirm-text").textContent = form.getAttribute("data-ask");
      yes.textContent = form.getAttribute("data-yes") || yesText;
      no.textContent = form.getAttribute("data-no") || noText;
      dialog.showModal();
    });
    yes.addEventListener("click", function () {
      var form = pending;
      pending = null;
      dialog.close();
      if (form) HTMLFormElement.prototype.submit.call(form);
    });
    no.addEventListener("click", function () {
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

  // --- a JSON GET: done(the data), or done(null) when it fails ---
  function getJSON(url, done) {
    var xhr = new XMLHttpRequest();
    xhr.open("GET", url);
    xhr.setRequestHeader("Accept", "application/json");
    xhr.onload = function () {
      if (xhr.status !== 200) return done(null);
      try { done(JSON.parse(xhr.responseText)); } catch (e) { done(null); }
    };
    xhr.onerror = function () { done(null); };
    xhr.send();
  }

  // --- <section id="bulk" data-op="ID">: <progress id="bulk-progress">, #bulk-status ---
  function pollBulk() {
    var box = document.getElementById("bulk");
    if (!box) return;
    var op = box.getAttribute("data-op");
    var bar = document.getElementById("bulk-progress");
    var status = document.getElementById("bulk-status");
    var misses = 0;
    function tick() {
      getJSON("/bulk/" + encodeURIComponent(op), function (d) {
        if (!d) {
          if (++misses < 20) setTimeout(tick, 1000);
          return;
        }
        misses = 0;
        if (d.total !== null) {
          bar.setAttribute("max", String(d.total));
          bar.setAttribute("value", String(d.done));
          bar.textContent = d.done + " of " + d.total;
        }
        if (status.textContent !== d.status) status.textContent = d.status;
        if (!d.finished) setTimeout(tick, 300);
        else refreshPart("#groups");
      });
    }
    tick();
  }

  // --- replace the element matching `selector` with the same one of a fresh copy of the page ---
  function refreshPart(selector) {
    if (!window.DOMParser) return;
    var xhr = new XMLHttpRequest();
    xhr.open("GET", window.location.href);
    xhr.setRequestHeader("Accept", "text/html");
    xhr.onload = function () {
      if (xhr.status !== 200) return;
      var page = new DOMParser().parseFromString(xhr.responseText, "text/html");
      var fresh = page.querySelector(selector);
      var here = document.querySelector(selector);
      if (fresh && here) here.replaceWith(document.importNode(fresh, true));
    };
    xhr.send();
  }

  // --- [data-refresh="workers"]: the table rewritten from a fresh copy of the page ---
  function refreshWorkers() {
    var box = document.querySelector('[data-refresh="workers"]');
    if (!box || !window.DOMParser) return;
    setInterval(function () {
      if (!document.hidden) refreshPart("#workers tbody");
    }, 3000);
  }

  document.addEventListener("DOMContentLoaded", function () {
    startLive();
    startConfirm();
    startFilter();
    pollBulk();
    refreshWorkers();
  });
})();
