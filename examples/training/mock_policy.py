"""A stand-in policy for running the training path without a GPU: an OpenAI-compatible endpoint
that plays a noisy calculator. Asked to add two numbers, it writes their sum with a probability
that falls with the number of digits (so the example tasks range from easy to nearly hopeless),
and a near miss otherwise. Every answer carries token ids and logprobs the way vLLM does with
`return_token_ids` (a byte-level tokenizer: one id per byte, role markers above 255), so the
segments Orchard records are exactly what this endpoint saw and sampled.

    python3 mock_policy.py --port 8001 [--seed 1]
"""

import argparse
import json
import random
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ROLES = {"system": 256, "user": 257, "assistant": 258}


def render_message(m):
    content = m.get("content") or ""
    if isinstance(content, list):
        content = "".join(p.get("text", "") for p in content)
    for call in m.get("tool_calls") or []:
        content += f"{call['function']['name']}({call['function']['arguments']})"
    return list(content.encode()) + [300]


def render_prompt(messages):
    ids = []
    for m in messages:
        ids.append(ROLES.get(m["role"], 259))
        ids.extend(render_message(m))
    return ids + [258]


class Policy:
    def __init__(self, seed):
        self.seed = seed
        self.episodes = {}
        self.lock = threading.Lock()

    def skill(self, a, b):
        digits = max(len(str(a)), len(str(b)))
        return {1: 0.95, 2: 0.8, 3: 0.55, 4: 0.35, 5: 0.2}.get(digits, 0.02)

    def reply(self, request):
        messages = request["messages"]
        if not any(m["role"] == "assistant" for m in messages):
            task = next((m.get("content") or "" for m in messages if m["role"] == "user"), "")
            if isinstance(task, list):
                task = "".join(p.get("text", "") for p in task)
            numbers = [int(n) for n in re.findall(r"\d+", task)[:2]] or [0, 0]
            a, b = (numbers + [0])[:2]
            # The n-th episode of a task draws from its own stream: however rollouts interleave,
            # each task sees the same outcomes in the same run.
            with self.lock:
                n = self.episodes.get(task, 0)
                self.episodes[task] = n + 1
            rng = random.Random(f"{self.seed}:{task}:{n}")
            right = rng.random() < self.skill(a, b)
            slip = rng.choice([-10, -1, 1, 10])
            answer = a + b if right else a + b + slip
            command = f"echo {answer} > /workspace/answer.txt"
            message = {"role": "assistant", "content": "", "tool_calls": [{"id": "call_1", "type": "function",
                       "function": {"name": "bash", "arguments": json.dumps({"command": command})}}]}
            finish = "tool_calls"
        else:
            message = {"role": "assistant", "content": "Done."}
            finish = "stop"
        completion = render_message(message)
        return {
            "id": "mock", "object": "chat.completion", "model": request.get("model", "mock"),
            "choices": [{"index": 0, "message": message, "finish_reason": finish, "token_ids": completion,
                         "logprobs": {"content": [{"token": "t", "logprob": -0.01 * (i % 7)} for i in completion]}}],
            "prompt_token_ids": render_prompt(messages),
            "usage": {"prompt_tokens": len(render_prompt(messages)), "completion_tokens": len(completion),
                      "total_tokens": len(render_prompt(messages)) + len(completion)},
        }


def serve(port, seed):
    policy = Policy(seed)

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))))
            answer = json.dumps(policy.reply(body)).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    return server


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=8001)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    serve(args.port, args.seed).serve_forever()
