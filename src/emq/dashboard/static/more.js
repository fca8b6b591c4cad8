// emq dashboard, dead letters and workers: a bulk move's progress polled from /bulk/<op>,
// and the workers table refreshed every few seconds. No framework; the pages work without it
// (reload them to see the latest figures).
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
      });
    }
    tick();
  }

  // --- [data-refresh="workers"]: the table rewritten from a fresh copy of the page ---
  function refreshWorkers() {
    var box = document.querySelector('[data-refresh="workers"]');
    if (!box || !window.DOMParser) return;
    setInterval(function () {
      if (document.hidden) return;
      var xhr = new XMLHttpRequest();
      xhr.open("GET", window.location.href);
      xhr.setRequestHeader("Accept", "text/html");
      xhr.onload = function () {
        if (xhr.status !== 200) return;
        var page = new DOMParser().parseFromString(xhr.responseText, "text/html");
        var fresh = page.querySelector('[data-refresh="workers"] tbody');
        var here = box.querySelector("tbody");
        if (fresh && here) here.replaceWith(document.importNode(fresh, true));
      };
      xhr.send();
    }, 3000);
  }

  document.addEventListener("DOMContentLoaded", function () {
    pollBulk();
    refreshWorkers();
  });
})();
