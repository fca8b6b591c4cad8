// emq dashboard, dead letters and workers: a bulk move's progress polled from /bulk/<op>
// (and the groups redrawn when it is done), and the workers table refreshed every 3 s.
// No framework; the pages work without it (reload them to see the latest figures).
(function () {
  "use strict";

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
    pollBulk();
    refreshWorkers();
  });
})();
