"""BAR rollout groups of the arithmetic tasks against a policy endpoint, written as a
trainer-ready batch — the whole training path without a GPU.

    python3 examples/training/run.py --out /tmp/batch            # starts orchard serve and a mock policy
    python3 examples/training/run.py --server http://HOST:8080 --api-key KEY \\
        --policy http://SGLANG:30000/v1 --model-name policy --out /tmp/batch   # a real setup

Steps: upload the tasks; a warm-up evaluation (`--warmup` attempts per task) whose pass counts
fit BAR's prior; then `--rounds` rounds of groups (`POST /v1/groups`, BAR on, policy version
`step-N`), each group read as soon as it is emitted. Writes `batch.slime.jsonl` (slime `Sample`
dicts), `batch.skyrl.json` (one SkyRL `GeneratorOutput`), `groups.jsonl` (every record) and
prints a table of what BAR did.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "host", "sdk-python", "src"))
sys.path.insert(0, HERE)

from orchard_client import Orchard, collect_groups, to_skyrl_generator_output, to_slime_samples  # noqa: E402


def start_orchard(binary):
    state = tempfile.mkdtemp(prefix="orchard-training-")
    proc = subprocess.Popen(
        # The policy (the mock by default) listens on this machine's loopback: allowed by name,
        # as an operator must allow any model endpoint tenants may reach.
        [binary, "serve", "--listen", "127.0.0.1:0", "--state-dir", os.path.join(state, "state"),
         "--model-allow", "127.0.0.0/8"],
        stderr=subprocess.PIPE, text=True,
    )
    for line in proc.stderr:
        if "serving on http://" in line:
            url = "http://" + line.split("serving on http://")[1].split()[0]
            threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True).start()
            return proc, url
    raise SystemExit("orchard serve did not start")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True)
    parser.add_argument("--server", help="an Orchard server (default: start one)")
    parser.add_argument("--api-key")
    parser.add_argument("--orchard", default=os.path.join(ROOT, "target", "debug", "orchard"))
    parser.add_argument("--policy", help="the policy's OpenAI-compatible URL (default: the mock)")
    parser.add_argument("--model-name", default="policy")
    parser.add_argument("--tasks", default=os.path.join(HERE, "tasks"))
    parser.add_argument("--size", type=int, default=8)
    parser.add_argument("--warmup", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--balanced", action="store_true")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)

    server_proc = None
    if args.server is None:
        server_proc, args.server = start_orchard(args.orchard)
    if args.policy is None:
        import mock_policy

        mock = mock_policy.serve(0, args.seed)
        threading.Thread(target=mock.serve_forever, daemon=True).start()
        args.policy = f"http://127.0.0.1:{mock.server_address[1]}/v1"
    try:
        run(args)
    finally:
        if server_proc is not None:
            server_proc.terminate()
            server_proc.wait()


def run(args):
    orchard = Orchard(args.server, api_key=args.api_key)
    dataset = orchard.upload_dataset(args.tasks)
    task_ids = sorted(os.listdir(args.tasks))
    model = {"url": args.policy, "name": args.model_name}
    common = {"tasks": {"archive": dataset}, "tools": ["shell"], "grader": "script"}

    warmup = orchard.submit_eval(dict(common, harnesses=["react"], attempts=args.warmup, concurrency=8, model=model))
    view = orchard.wait(warmup["id"])
    print(f"warm-up {warmup['id']}: {view['counts']['passed']}/{view['counts']['done']} passed", file=sys.stderr)

    slime, groups, table = [], [], []
    with open(os.path.join(args.out, "groups.jsonl"), "w") as log:
        for step in range(1, args.rounds + 1):
            request = dict(
                common, task_ids=task_ids, harness="react", size=args.size, policy_version=f"step-{step}",
                model=dict(model, sampling={"temperature": 1.0}),
                bar={"balanced": args.balanced, "prior_from": warmup["id"], "seed": args.seed + step},
            )
            records = []
            for record in orchard.groups(request):
                log.write(json.dumps(record) + "\n")
                records.append(record)
                if record["type"] == "skipped":
                    table.append((step, record["task_id"], "skipped", "-", "-", record["estimated_pass_rate"], record["p_admit"]))
                elif record["type"] == "group":
                    g = record
                    table.append((step, g["task_id"], g["outcome"], g["generated"], f"{g['positives']}+/{g['negatives']}-",
                                  g["estimated_pass_rate"], None))
            for group in collect_groups(records):
                groups.append(group)
                slime.extend(to_slime_samples(group, group_index=len(groups) - 1))
    with open(os.path.join(args.out, "batch.slime.jsonl"), "w") as f:
        for sample in slime:
            f.write(json.dumps(sample) + "\n")
    with open(os.path.join(args.out, "batch.skyrl.json"), "w") as f:
        json.dump(to_skyrl_generator_output(groups), f)

    print(f"{'step':>4}  {'task':<12} {'outcome':<10} {'rollouts':>8}  {'selected':<8} {'est. pass':>9}  {'p(admit)':>8}")
    for step, task, outcome, generated, split, rate, p_admit in table:
        admit = "" if p_admit is None else f"{p_admit:.3f}"
        print(f"{step:>4}  {task:<12} {outcome:<10} {generated:>8}  {split:<8} {rate:>9.3f}  {admit:>8}")
    print(f"{len(groups)} groups, {len(slime)} samples -> {args.out}")


if __name__ == "__main__":
    main()
