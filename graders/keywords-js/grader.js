// The `keywords` grader, written in JavaScript (built with componentize-js through jco).
//
// The run's answer (the outcome's final answer, or the file `answer_file` in the sandbox) must
// contain every `required` keyword and none of the `forbidden` ones (task.toml `[metadata]`;
// case-insensitive unless `case_sensitive = true`). The reward is the fraction of required
// keywords found, and 0 when a forbidden one appears; the run passes when all are found and
// none is forbidden. A task with no keywords at all is `unknown`.

import { readFile } from 'orchard:plugin/sandbox@0.2.0';

export function check(answer, meta) {
  const sensitive = meta.case_sensitive === true;
  const norm = (s) => (sensitive ? s : s.toLowerCase());
  const text = norm(answer);
  const required = meta.required ?? [];
  const forbidden = meta.forbidden ?? [];
  const found = required.filter((k) => text.includes(norm(k)));
  const missing = required.filter((k) => !text.includes(norm(k)));
  const present = forbidden.filter((k) => text.includes(norm(k)));
  const fraction = required.length ? found.length / required.length : 1;
  const reward = present.length ? 0 : fraction;
  return { reward, passed: missing.length === 0 && present.length === 0, found, missing, present };
}

function graded(reward, passed, explanation, subScores = []) {
  return { tag: 'graded', val: { reward, passed, subScores, explanation } };
}

export const grading = {
  grade(task, _trajectory, outcome, _environment) {
    let meta = {};
    try {
      meta = JSON.parse(task.metadata || '{}');
    } catch (e) {
      return { tag: 'unknown', val: `task metadata is not JSON: ${e}` };
    }
    if (meta.metadata && typeof meta.metadata === 'object') meta = meta.metadata;
    const lists = ['required', 'forbidden'].filter((k) => meta[k] !== undefined);
    for (const k of lists) {
      if (!Array.isArray(meta[k]) || meta[k].some((x) => typeof x !== 'string')) {
        return { tag: 'unknown', val: `task metadata: ${k} must be a list of strings` };
      }
    }
    if (!(meta.required?.length || meta.forbidden?.length)) {
      return { tag: 'unknown', val: 'task metadata: no `required` or `forbidden` keywords' };
    }
    let answer = outcome.answer;
    if (typeof meta.answer_file === 'string') {
      try {
        answer = new TextDecoder().decode(readFile(meta.answer_file));
      } catch (e) {
        if (e?.payload?.tag === 'not-found') return graded(0, false, `no answer: ${meta.answer_file} does not exist`);
        throw e;
      }
    }
    if (answer === undefined || answer === null) return graded(0, false, 'the run gave no answer');
    const r = check(answer, meta);
    const parts = [`${r.found.length} of ${(meta.required ?? []).length} required keywords found`];
    if (r.missing.length) parts.push(`missing: ${r.missing.join(', ')}`);
    if (r.present.length) parts.push(`forbidden present: ${r.present.join(', ')}`);
    return graded(r.reward, r.passed, parts.join('; '), [{ name: 'found', value: r.found.length }]);
  },
};
