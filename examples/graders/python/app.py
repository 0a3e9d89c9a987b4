"""A grader template: passes when the run's answer contains the task's `expected` text."""

import json

from wit_world import exports
from wit_world.exports.grading import Score, Verdict_Graded, Verdict_Unknown


class Grading(exports.Grading):
    def grade(self, task, trajectory, outcome, environment):
        meta = json.loads(task.metadata or "{}").get("metadata", {})
        want = meta.get("expected")
        if not isinstance(want, str):
            return Verdict_Unknown("task metadata has no `expected`")
        found = outcome.answer is not None and want in outcome.answer
        verb = "contains" if found else "lacks"
        return Verdict_Graded(
            Score(reward=1.0 if found else 0.0, passed=found, sub_scores=[], explanation=f'answer {verb} "{want}"')
        )
