"""Against a live server (ORCHARD_URL, TASKS_DIR, MODEL_URL from the Rust test that started it):
upload tasks, stream BAR groups, and turn them into slime, verl and SkyRL batches."""

import json
import os
import unittest

from orchard_client import Orchard, OrchardError, collect_groups, to_skyrl_generator_output, to_slime_samples, to_verl_outputs


class LiveGroups(unittest.TestCase):
    def setUp(self):
        self.orchard = Orchard(os.environ["ORCHARD_URL"], api_key=os.environ.get("ORCHARD_API_KEY"))

    def request(self, dataset, **extra):
        body = {
            "tasks": {"archive": dataset}, "task_ids": ["coin", "coin2"], "harness": "react", "tools": ["shell"],
            "grader": "script", "size": 4, "policy_version": "v1",
            "bar": {"abandon_below": 0.0, "admit": False},
            "model": {"url": os.environ["MODEL_URL"], "name": "policy"},
        }
        body.update(extra)
        return body

    def test_groups_become_trainer_batches(self):
        dataset = self.orchard.upload_dataset(os.environ["TASKS_DIR"])
        records = list(self.orchard.groups(self.request(dataset)))
        self.assertEqual(records[-1]["type"], "end", records[-1])
        groups = list(collect_groups(records))
        self.assertEqual(len(groups), 2)
        for group in groups:
            self.assertEqual(len(group.rollouts), 4)
            rewards = [r["reward"] for r in group.rollouts]
            self.assertIn(1.0, rewards)
            self.assertIn(0.0, rewards)

            slime = to_slime_samples(group, group_index=7)
            self.assertEqual(len(slime), 4)
            for s in slime:
                self.assertEqual(len(s["loss_mask"]), s["response_length"])
                self.assertEqual(len(s["rollout_log_probs"]), s["response_length"])
                self.assertEqual(s["group_index"], 7)
                self.assertEqual(s["status"], "completed")
                self.assertEqual(s["metadata"]["policy_version"], "v1")
                # Only sampled tokens are trained on: the first response token follows the prompt's
                # assistant marker and was sampled.
                self.assertEqual(s["loss_mask"][0], 1)
                self.assertIn(0, s["loss_mask"], "the tool's output is not trained on")

            verl = to_verl_outputs(group)
            for v in verl:
                self.assertEqual(len(v["response_mask"]), len(v["response_ids"]))
                self.assertEqual(v["num_turns"], 5)

        skyrl = to_skyrl_generator_output(groups)
        self.assertEqual(len(skyrl["response_ids"]), 8)
        self.assertEqual(sorted(set(skyrl["rewards"])), [0.0, 1.0])
        for ids, mask, lps in zip(skyrl["response_ids"], skyrl["loss_masks"], skyrl["rollout_logprobs"]):
            self.assertEqual(len(ids), len(mask))
            self.assertEqual(len(ids), len(lps))
        print(json.dumps({"sequences": len(skyrl["rewards"]), "rewards": skyrl["rewards"]}))

    def test_refusals_name_the_field(self):
        with self.assertRaises(OrchardError) as e:
            list(self.orchard.groups(self.request("sha256:" + "0" * 64, size=1)))
        self.assertEqual(e.exception.status, 422)
        self.assertIn("size", e.exception.detail)


if __name__ == "__main__":
    unittest.main()
