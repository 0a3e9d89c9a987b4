// A grader template: passes when the run's answer contains the task's `expected` text.

export const grading = {
  grade(task, _trajectory, outcome, _environment) {
    const want = JSON.parse(task.metadata || '{}').metadata?.expected;
    if (typeof want !== 'string') return { tag: 'unknown', val: 'task metadata has no `expected`' };
    const found = typeof outcome.answer === 'string' && outcome.answer.includes(want);
    return {
      tag: 'graded',
      val: { reward: found ? 1 : 0, passed: found, subScores: [], explanation: `answer ${found ? 'contains' : 'lacks'} "${want}"` },
    };
  },
};
