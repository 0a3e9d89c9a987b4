// Live updates for Orchard's pages; everything also reads without it.
// - The jobs list refetches its rows every 2 s.
// - A job's page follows its server-sent events: counts tick as they change, and the
//   matrix and tables are fetched again (at most once a second) as rollouts finish.
(function () {
  "use strict";
  function swap(el, url) {
    return fetch(url, { credentials: "same-origin", headers: { "Accept": "text/html" } })
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (html) { if (html !== null) { el.innerHTML = html; } })
      .catch(function () {});
  }

  var rows = document.getElementById("jobs-rows");
  if (rows && rows.dataset.live) {
    setInterval(function () { swap(rows, rows.dataset.live); }, 2000);
  }

  var live = document.getElementById("live");
  if (live && live.dataset.events && !live.dataset.finished && window.EventSource) {
    var pending = null;
    var refresh = function () {
      if (pending) { return; }
      pending = setTimeout(function () { pending = null; swap(live, live.dataset.live); }, 1000);
    };
    var source = new EventSource(live.dataset.events);
    source.addEventListener("counts", function (e) {
      var data = JSON.parse(e.data);
      var counts = data.counts || {};
      Object.keys(counts).forEach(function (k) {
        var cell = live.querySelector('[data-count="' + k + '"]');
        if (cell) { cell.textContent = counts[k]; }
      });
      var done = document.getElementById("done");
      if (done && counts.done !== undefined) { done.textContent = counts.done; }
      var bar = document.getElementById("progress");
      if (bar && counts.done !== undefined) { bar.value = counts.done; }
      var status = document.getElementById("status");
      if (status && data.status) { status.textContent = data.status; status.className = "status " + data.status; }
    });
    source.addEventListener("rollout", refresh);
    source.addEventListener("end", function () {
      source.close();
      if (pending) { clearTimeout(pending); pending = null; }
      swap(live, live.dataset.live).then(function () { live.dataset.finished = "1"; });
    });
  }
})();
