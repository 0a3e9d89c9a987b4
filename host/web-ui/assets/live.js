// Live updates for Orchard's pages; everything also reads without it.
// - The jobs list refetches its rows every 2 s.
// - A job's page follows its server-sent events: as counts change and rollouts finish, its live
//   part (counts, matrix and tables, from one rendering) is fetched again, at most once a second.
// - A rollout's screen recording plays one frame at a time.
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

  // A rollout's screen recording: one frame at a time, stepped or played (1 frame a second).
  var replay = document.getElementById("replay");
  if (replay) {
    var frames = replay.querySelectorAll("figure.frame");
    var slider = replay.querySelector("input[type=range]");
    var at = replay.querySelector(".replay-at");
    var current = 0, timer = null;
    var show = function (i) {
      current = Math.max(0, Math.min(frames.length - 1, i));
      for (var k = 0; k < frames.length; k++) { frames[k].hidden = k !== current; }
      slider.value = String(current + 1);
      at.textContent = "frame " + (current + 1) + " of " + frames.length;
    };
    var stop = function () { if (timer) { clearInterval(timer); timer = null; } };
    replay.addEventListener("click", function (e) {
      var go = e.target && e.target.dataset ? e.target.dataset.go : null;
      if (!go) { return; }
      if (go === "play") {
        if (timer) { stop(); return; }
        if (current === frames.length - 1) { show(0); }
        timer = setInterval(function () { if (current >= frames.length - 1) { stop(); } else { show(current + 1); } }, 1000);
        return;
      }
      stop();
      show(go === "first" ? 0 : go === "back" ? current - 1 : current + 1);
    });
    slider.addEventListener("input", function () { stop(); show(parseInt(slider.value, 10) - 1); });
    show(0);
  }
})();
