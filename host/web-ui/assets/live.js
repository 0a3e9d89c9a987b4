// Live updates for Orchard's pages; everything also reads without it.
// - The jobs list refetches its rows every 2 s.
// - A job's page follows its server-sent events: as counts change and rollouts finish, its live
//   part (counts, matrix and tables, from one rendering) is fetched again, at most once a second.
// - A rollout's screen recording plays one frame at a time.
// - A running rollout's desktop is drawn live from VNC over a WebSocket (watch-only).
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

  // A running rollout's desktop: a watch-only VNC (RFB 3.8) client drawing raw rectangles on the
  // canvas, over the page's WebSocket.
  var canvas = document.getElementById("live-desktop");
  if (canvas && canvas.dataset.vnc && window.WebSocket) {
    var state = document.getElementById("live-desktop-state");
    var say = function (t) { if (state) { state.textContent = t; } };
    var scheme = location.protocol === "https:" ? "wss://" : "ws://";
    var ws = null, tries = 0;
    var buf = new Uint8Array(0), ctx = canvas.getContext("2d"), phase = "version", width = 0, height = 0;
    var take = function (n) { if (buf.length < n) { return null; } var out = buf.slice(0, n); buf = buf.slice(n); return out; };
    var u16 = function (b, o) { return (b[o] << 8) | b[o + 1]; };
    var u32 = function (b, o) { return ((b[o] << 24) >>> 0) + (b[o + 1] << 16) + (b[o + 2] << 8) + b[o + 3]; };
    var send = function (bytes) { ws.send(new Uint8Array(bytes)); };
    var request = function (incremental) {
      send([3, incremental ? 1 : 0, 0, 0, 0, 0, width >> 8, width & 255, height >> 8, height & 255]);
    };
    var rects = 0, rect = null;
    var step = function () {
      for (;;) {
        var b;
        if (phase === "version") {
          if (!(b = take(12))) { return; }
          send(Array.from("RFB 003.008\n", function (c) { return c.charCodeAt(0); }));
          phase = "security";
        } else if (phase === "security") {
          if (buf.length < 1 || buf.length < 1 + buf[0]) { return; }
          var types = take(1 + buf[0]);
          if (Array.prototype.slice.call(types, 1).indexOf(1) < 0) { say("the desktop asks for a password"); ws.close(); return; }
          send([1]);
          phase = "result";
        } else if (phase === "result") {
          if (!(b = take(4))) { return; }
          if (u32(b, 0) !== 0) { say("refused by the desktop"); ws.close(); return; }
          send([1]);
          phase = "init";
        } else if (phase === "init") {
          if (buf.length < 24 || buf.length < 24 + u32(buf, 20)) { return; }
          b = take(24 + u32(buf, 20));
          width = u16(b, 0); height = u16(b, 2);
          canvas.width = width; canvas.height = height;
          // 32 bits per pixel, little-endian, red in the low byte: RGBX, as ImageData wants.
          send([0, 0, 0, 0, 32, 24, 0, 1, 0, 255, 0, 255, 0, 255, 0, 8, 16, 0, 0, 0]);
          send([2, 0, 0, 1, 0, 0, 0, 0]); // raw encoding only
          request(false);
          say("live: " + width + "x" + height);
          canvas.dataset.size = width + "x" + height;
          phase = "message";
        } else if (phase === "message") {
          if (buf.length < 1) { return; }
          if (buf[0] === 0) {
            if (!(b = take(4))) { return; }
            rects = u16(b, 2);
            phase = rects ? "rect" : "message";
            if (!rects) { request(true); }
          } else if (buf[0] === 2) {
            take(1);
          } else if (buf[0] === 3) {
            if (buf.length < 8 || buf.length < 8 + u32(buf, 4)) { return; }
            take(8 + u32(buf, 4));
          } else if (buf[0] === 1) {
            if (buf.length < 6 || buf.length < 6 + 6 * u16(buf, 4)) { return; }
            take(6 + 6 * u16(buf, 4));
          } else { say("unexpected message " + buf[0]); ws.close(); return; }
        } else if (phase === "rect") {
          if (!rect) {
            if (!(b = take(12))) { return; }
            rect = { x: u16(b, 0), y: u16(b, 2), w: u16(b, 4), h: u16(b, 6), enc: u32(b, 8) };
            if (rect.enc !== 0) { say("unexpected encoding " + rect.enc); ws.close(); return; }
          }
          if (!(b = take(rect.w * rect.h * 4))) { return; }
          if (rect.w && rect.h) {
            for (var k = 3; k < b.length; k += 4) { b[k] = 255; }
            ctx.putImageData(new ImageData(new Uint8ClampedArray(b.buffer), rect.w, rect.h), rect.x, rect.y);
          }
          canvas.dataset.frames = String(Number(canvas.dataset.frames || 0) + 1);
          rect = null;
          if (--rects === 0) { phase = "message"; request(true); }
        }
      }
    };
    // A rollout just claimed may not have its desktop yet: try again every 2 s, a minute at most.
    var connect = function () {
      tries += 1;
      buf = new Uint8Array(0); phase = "version"; rects = 0; rect = null;
      ws = new WebSocket(scheme + location.host + canvas.dataset.vnc, ["binary"]);
      ws.binaryType = "arraybuffer";
      ws.onmessage = function (e) {
        var chunk = new Uint8Array(e.data), joined = new Uint8Array(buf.length + chunk.length);
        joined.set(buf); joined.set(chunk, buf.length); buf = joined;
        step();
      };
      ws.onclose = function () {
        if (phase === "version" && tries < 30) { say("waiting for the desktop…"); setTimeout(connect, 2000); return; }
        say("the desktop's view closed (the rollout may have finished)");
      };
    };
    connect();
  }
})();
