"""HTTP client for an Orchard server, on the standard library only."""

import io
import json
import os
import tarfile
import urllib.error
import urllib.request


class OrchardError(Exception):
    """The server refused a request; `status` and `detail` say why."""

    def __init__(self, status, detail):
        super().__init__(f"HTTP {status}: {detail}")
        self.status = status
        self.detail = detail


def send(url, method, data=None, headers=(), timeout=3600):
    """One request to an Orchard server: the open response, or `OrchardError` with the server's
    `detail` (what the request got wrong)."""
    request = urllib.request.Request(url, data=data, method=method)
    for name, value in headers:
        request.add_header(name, value)
    try:
        return urllib.request.urlopen(request, timeout=timeout)
    except urllib.error.HTTPError as e:
        raw = e.read().decode(errors="replace")
        try:
            detail = json.loads(raw).get("detail", raw)
        except ValueError:
            detail = raw
        raise OrchardError(e.code, detail) from None


class Orchard:
    def __init__(self, url, api_key=None, timeout=3600):
        self.url = url.rstrip("/")
        self.api_key = api_key
        self.timeout = timeout

    def _request(self, method, path, body=None, content_type="application/json", accept="application/json"):
        data = None
        if body is not None:
            data = body if isinstance(body, (bytes, bytearray)) else json.dumps(body).encode()
        headers = [("Accept", accept)]
        if data is not None:
            headers.append(("Content-Type", content_type))
        if self.api_key:
            headers.append(("X-API-Key", self.api_key))
        return send(self.url + path, method, data, headers, self.timeout)

    def _json(self, method, path, body=None):
        with self._request(method, path, body) as response:
            return json.loads(response.read() or b"null")

    def upload_dataset(self, path):
        """Uploads a folder of Harbor tasks (or a .tar.gz of them); returns the dataset id."""
        if os.path.isdir(path):
            buffer = io.BytesIO()
            with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
                for name in sorted(os.listdir(path)):
                    tar.add(os.path.join(path, name), arcname=name)
            data = buffer.getvalue()
        else:
            with open(path, "rb") as f:
                data = f.read()
        with self._request("POST", "/v1/datasets", data, content_type="application/gzip") as response:
            return json.loads(response.read())["id"]

    def groups(self, request):
        """Runs rollout groups (`POST /v1/groups`); yields each record as it arrives."""
        with self._request("POST", "/v1/groups", request, accept="application/x-ndjson") as response:
            for line in response:
                line = line.strip()
                if line:
                    yield json.loads(line)

    def submit_eval(self, spec):
        """Submits an evaluation (`POST /v1/evals`); returns its view (with `id`)."""
        return self._json("POST", "/v1/evals", spec)

    def evaluation(self, eval_id):
        return self._json("GET", f"/v1/evals/{eval_id}")

    def wait(self, eval_id, poll=0.5, timeout=3600):
        """Polls an evaluation until nothing is left to run; returns its view."""
        import time

        deadline = time.time() + timeout
        while True:
            view = self.evaluation(eval_id)
            if view["status"] in ("done", "cancelled"):
                return view
            if time.time() > deadline:
                raise TimeoutError(f"evaluation {eval_id} still {view['status']} after {timeout} s")
            time.sleep(poll)

    def open_proxy(self, model):
        """A recording proxy session: point an OpenAI client at `url + session["base_url"]`."""
        return self._json("POST", "/v1/proxy", {"model": model})

    def proxy_record(self, session_id):
        return self._json("GET", f"/v1/proxy/{session_id}")

    def close_proxy(self, session_id):
        return self._json("DELETE", f"/v1/proxy/{session_id}")
