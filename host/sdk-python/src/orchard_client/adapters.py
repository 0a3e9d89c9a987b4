"""Group records → trainer batches.

Each emitted group's selected rollouts become training sequences, one per token-faithful
segment (a rollout whose history was rewritten has several), carrying the rollout's reward, the
group's advantage for it, its loss mask (1 on sampled tokens only) and the sampled tokens'
logprobs. Nothing is re-tokenized: the ids are the ones the endpoint saw and sampled.
"""

from dataclasses import dataclass, field


@dataclass
class Group:
    """An emitted group: its record and its selected rollouts, in the record's order."""

    record: dict
    rollouts: list = field(default_factory=list)

    @property
    def group_id(self):
        return self.record["group_id"]

    def advantage(self, rollout_id):
        return self.record["advantages"][self.record["selected"].index(rollout_id)]


def collect_groups(records):
    """Yields each group as soon as its record arrives (rollout records come before it)."""
    rollouts = {}
    for record in records:
        kind = record.get("type")
        if kind == "rollout":
            rollouts[record["rollout_id"]] = record
        elif kind == "group" and record.get("outcome") == "emitted":
            yield Group(record, [rollouts[r] for r in record["selected"] if r in rollouts])


def _sequences(group):
    """(group index, rollout, segment index, segment) for every training sequence of a group."""
    for i, rollout in enumerate(group.rollouts):
        for j, segment in enumerate(rollout.get("segments") or []):
            yield i, rollout, j, segment


def _status(rollout):
    return {"completed": "completed", "truncated": "truncated"}.get(rollout["status"], "aborted")


def to_slime_samples(group, group_index=0):
    """Dicts with slime `Sample`'s fields (`Sample(**d)`; `status` is the `Sample.Status` value)."""
    samples = []
    for i, rollout, j, seg in _sequences(group):
        samples.append(
            {
                "group_index": group_index,
                "index": i,
                "prompt": rollout["messages"][: 2] if rollout.get("messages") else "",
                "response": "\n".join(
                    m.get("content") or "" for m in rollout.get("messages") or [] if m.get("role") == "assistant"
                ),
                "tokens": seg["prompt_ids"] + seg["response_ids"],
                "response_length": len(seg["response_ids"]),
                "reward": rollout["reward"],
                "loss_mask": list(seg["loss_mask"]),
                "rollout_log_probs": list(seg["logprobs"]),
                "status": _status(rollout),
                "metadata": {
                    "rollout_id": rollout["rollout_id"],
                    "group_id": group.group_id,
                    "task_id": rollout["task_id"],
                    "segment": j,
                    "advantage": group.advantage(rollout["rollout_id"]),
                    "policy_version": rollout.get("policy_version"),
                },
            }
        )
    return samples


def to_verl_outputs(group):
    """Dicts with verl `AgentLoopOutput`'s fields (`AgentLoopOutput(**d)`)."""
    outputs = []
    for _, rollout, j, seg in _sequences(group):
        outputs.append(
            {
                "prompt_ids": list(seg["prompt_ids"]),
                "response_ids": list(seg["response_ids"]),
                "response_mask": list(seg["loss_mask"]),
                "response_logprobs": list(seg["logprobs"]),
                "reward_score": rollout["reward"],
                "num_turns": len(seg["turns"]) * 2 + 1,
                "metrics": {"generate_sequences": rollout["timings"]["agent_seconds"], "tool_calls": 0.0},
                "extra_fields": {
                    "rollout_id": rollout["rollout_id"],
                    "group_id": group.group_id,
                    "segment": j,
                    "advantage": group.advantage(rollout["rollout_id"]),
                },
            }
        )
    return outputs


def to_skyrl_generator_output(groups):
    """One dict shaped like SkyRL's `GeneratorOutput` for a batch of groups."""
    out = {
        "prompt_token_ids": [],
        "response_ids": [],
        "rewards": [],
        "loss_masks": [],
        "stop_reasons": [],
        "rollout_logprobs": [],
        "rollout_metrics": {},
    }
    advantages = []
    for group in groups:
        for _, rollout, _, seg in _sequences(group):
            out["prompt_token_ids"].append(list(seg["prompt_ids"]))
            out["response_ids"].append(list(seg["response_ids"]))
            out["rewards"].append(rollout["reward"])
            out["loss_masks"].append(list(seg["loss_mask"]))
            out["stop_reasons"].append(rollout["status"])
            out["rollout_logprobs"].append(list(seg["logprobs"]))
            advantages.append(group.advantage(rollout["rollout_id"]))
    n = len(out["rewards"])
    out["rollout_metrics"] = {
        "orchard/sequences": n,
        "orchard/mean_reward": sum(out["rewards"]) / n if n else 0.0,
        "orchard/mean_abs_advantage": sum(abs(a) for a in advantages) / n if n else 0.0,
    }
    return out
