"""A Kubernetes API server double for Orchard's tests, on kmock's KubernetesEmulator.

kmock (PyPI) keeps objects in memory and serves list, watch (ADDED/MODIFIED/DELETED), get,
create, merge patch (including pods/status) and delete over real HTTP — what kube-rs's client
and watcher use. This file adds what the tests need on top, and fills two gaps of kmock 0.8:

- objects get a uid, a creationTimestamp and a resourceVersion on create (kmock stores the
  body as sent; a real API server sets these);
- `/_test/requests` returns every request seen (method, path, query) so a test can prove what
  did NOT go through the API server (exec, attach, port-forward);
- Status reasons are the machine-readable ones (NotFound, AlreadyExists) clients match on;
- `/_test/faults` (POST) makes the next N matching requests fail with a status (429 storms,
  5xx) before kmock sees them, so no object is created by a refused request;
- optimistic concurrency, as a real API server has it: every write gives the object a new
  resourceVersion, and a patch whose body names a `metadata.resourceVersion` other than the
  object's current one is refused with 409 Conflict (kmock applies patches unconditionally).
  Writes are serialised, so that a check and the write it guards are one step.
- a pod's `spec.activeDeadlineSeconds` may be set where it was not, or lowered, never raised
  or removed (422 Invalid), as a real API server validates a pod update.

Label selectors are not applied by kmock; Orchard filters client-side as well, so the tests do
not depend on it. Prints `URL http://127.0.0.1:PORT` once serving.
"""

import asyncio
import datetime
import itertools
import uuid

import aiohttp.web
import kmock
from kmock._internal.k8s import KubernetesObjectConflictError, KubernetesObjectNotFoundError

_versions = itertools.count(1)


class OrchardTestApiServer(kmock.KubernetesEmulator):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.seen = []
        self.faults = []
        self.writes = asyncio.Lock()

    async def _handle(self, request):
        path = request.url.path
        if path == "/_test/requests":
            return aiohttp.web.json_response(self.seen)
        if path == "/_test/faults":
            self.faults.append(dict(request.data))
            return aiohttp.web.json_response({"faults": self.faults})
        method = str(getattr(request.method, "value", request.method)).upper()
        self.seen.append({"method": method, "path": path, "query": request.url.query_string})
        for fault in self.faults:
            if fault["count"] > 0 and method == fault["method"] and path.endswith(fault["path_suffix"]):
                fault["count"] -= 1
                code = fault["status"]
                reason = "TooManyRequests" if code == 429 else "InternalError"
                return _status(code, reason, f"injected by the test: {code}")
        if request.action == kmock.action.CREATE and isinstance(request.data, dict):
            meta = request.data.setdefault("metadata", {})
            meta.setdefault("uid", str(uuid.uuid4()))
            meta.setdefault("creationTimestamp", datetime.datetime.now(tz=datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"))
            meta["resourceVersion"] = str(next(_versions))
        if request.action == kmock.action.UPDATE and request.name is not None and isinstance(request.data, dict):
            async with self.writes:
                key = (request.resource, request.namespace, request.name)
                current = self._objects[key] if key in self._objects else None
                if current is not None and not current.deleted:
                    meta = request.data.setdefault("metadata", {})
                    wanted = meta.get("resourceVersion")
                    have = current.get("metadata", {}).get("resourceVersion")
                    if wanted is not None and wanted != have:
                        return _status(409, "Conflict", f"{path}: the object has been modified (resourceVersion "
                                       f"{have}, not {wanted}); please apply your changes to the latest version")
                    refused = _deadline_raised(request, current)
                    if refused:
                        return _status(422, "Invalid", f"{path}: {refused}")
                    meta["resourceVersion"] = str(next(_versions))
                return await self._handled(request, path)
        return await self._handled(request, path)

    async def _handled(self, request, path):
        # kmock's Status reasons are prose; clients (kube-rs's get_opt among them) match the
        # machine-readable reasons a real API server sends.
        try:
            return await super()._handle(request)
        except KubernetesObjectNotFoundError:
            return _status(404, "NotFound", f"{path} not found")
        except KubernetesObjectConflictError:
            return _status(409, "AlreadyExists", f"{path}: already exists")


def _deadline_raised(request, current):
    """Why a pod patch's `spec.activeDeadlineSeconds` is refused (raised or removed), or None."""
    if getattr(request.resource, "plural", None) != "pods" or request.subresource:
        return None
    spec = request.data.get("spec")
    if not isinstance(spec, dict) or "activeDeadlineSeconds" not in spec:
        return None
    old = (current.get("spec") or {}).get("activeDeadlineSeconds")
    new = spec["activeDeadlineSeconds"]
    if old is None:
        return None
    if new is None:
        return "spec.activeDeadlineSeconds: Invalid value: null: must not update from a positive integer to nil value"
    if new > old:
        return f"spec.activeDeadlineSeconds: Invalid value: {new}: must be less than or equal to previous value"
    return None


def _status(code, reason, message):
    body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "code": code,
            "reason": reason, "message": message}
    return aiohttp.web.json_response(body, status=code)


async def main():
    async with OrchardTestApiServer() as k, kmock.Server(k) as server:
        k.resources.load_bundled()
        print(f"URL {server.url}", flush=True)
        await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main())
