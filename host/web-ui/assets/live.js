// Live updates for Orchard's pages; everything also reads without it.
// - The jobs list refetches its rows every 2 s.
// - A job's page follows its server-sent events: as counts change and rollouts finish, its live
//   part (counts, matrix and tables, from one rendering) is fetched again, at most once a second.
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
    // A finished job offers nothing to cancel.
    var finished = function () {
      var cancel = document.getElementById("cancel");
      if (cancel && cancel.form) { cancel.form.remove(); }
    };
    // Counts, matrix and totals come from one rendering of the page's live part, never patched
    // apart (they would disagree while rollouts finish): a change of either refreshes it.
    source.addEventListener("counts", function (e) {
      var data = JSON.parse(e.data);
      if (data.status === "done" || data.status === "cancelled") { finished(); }
      refresh();
    });
    source.addEventListener("rollout", refresh);
    source.addEventListener("end", function () {
      finished();
      source.close();
      if (pending) { clearTimeout(pending); pending = null; }
      swap(live, live.dataset.live).then(function () { live.dataset.finished = "1"; });
    });
  }
})();
