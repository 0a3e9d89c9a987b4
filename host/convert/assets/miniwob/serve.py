#!/usr/bin/env python3
"""Serves MiniWoB++ pages inside a sandbox, for Orchard tasks made by `orchard convert miniwob`.

Every page under /miniwob/ gets a small script: the episode starts at once (no START cover), seeded
(MINIWOB_SEED and the page's name), with the 10 s episode limit lifted as BrowserGym does; the
first reward `core.endEpisode` gives for a page is kept, and `GET /__orchard/reward?env=NAME`
answers it (`{}` until there is one) for the task's verifier. Python's standard library only.
"""

import argparse
import json
import os
import threading
import urllib.parse
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

EPISODE_JS = r"""(function () {
  var seed = %s;
  window.addEventListener('load', function () {
    // Lifted (a timer above 2^31 - 1 ms would fire at once).
    core.EPISODE_MAX_TIME = 2000000000;
    var env = location.pathname.split('/').pop().replace(/\.html$/, '');
    var end = core.endEpisode;
    core.endEpisode = function (reward, timeProportional, reason) {
      if (core.EP_TIMER !== null) {
        var x = new XMLHttpRequest();
        x.open('POST', '/__orchard/reward?env=' + encodeURIComponent(env), false);
        x.send(JSON.stringify({raw: reward, reason: reason === undefined ? null : reason}));
      }
      return end.apply(this, arguments);
    };
    Math.seedrandom(seed + ':' + env);
    core.startEpisodeReal();
  });
})();
"""

REWARDS = {}
LOCK = threading.Lock()


class Pages(SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def reply(self, status, body, kind):
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        url = urllib.parse.urlsplit(self.path)
        if url.path == "/__orchard/reward":
            env = urllib.parse.parse_qs(url.query).get("env", [""])[0]
            with LOCK:
                return self.reply(200, json.dumps(REWARDS.get(env, {})), "application/json")
        if url.path == "/__orchard/episode.js":
            return self.reply(200, EPISODE_JS % json.dumps(self.server.seed), "application/javascript")
        if url.path.startswith("/miniwob/") and url.path.endswith(".html"):
            path = os.path.join(self.directory, url.path.lstrip("/"))
            if os.path.realpath(path).startswith(os.path.realpath(self.directory) + os.sep) and os.path.isfile(path):
                with open(path, encoding="utf-8") as f:
                    page = f.read()
                tag = '<script src="/__orchard/episode.js"></script>'
                page = page.replace("</body>", tag + "</body>", 1) if "</body>" in page else page + tag
                return self.reply(200, page, "text/html; charset=utf-8")
        return super().do_GET()

    def do_POST(self):
        url = urllib.parse.urlsplit(self.path)
        if url.path != "/__orchard/reward":
            return self.reply(404, "{}", "application/json")
        env = urllib.parse.parse_qs(url.query).get("env", [""])[0]
        length = min(int(self.headers.get("Content-Length") or 0), 4096)
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
            raw = float(body.get("raw"))
        except (ValueError, TypeError, AttributeError):
            return self.reply(400, "{}", "application/json")
        with LOCK:
            # The first episode's reward counts: a new episode cannot replace it.
            REWARDS.setdefault(env, {"raw": raw, "reason": body.get("reason")})
        self.reply(200, "{}", "application/json")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "html"))
    args = parser.parse_args()
    handler = lambda *a, **k: Pages(*a, directory=args.root, **k)
    server = ThreadingHTTPServer(("127.0.0.1", args.port), handler)
    server.seed = os.environ.get("MINIWOB_SEED", "0")
    server.serve_forever()


if __name__ == "__main__":
    main()
