// Unit tests of the matching, run natively: node --test (the component's import is stubbed).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { register } from 'node:module';

register('data:text/javascript,' + encodeURIComponent(`
export async function resolve(spec, ctx, next) {
  if (spec.startsWith('orchard:')) return { url: 'data:text/javascript,export const readFile = () => { throw new Error("no sandbox"); };', shortCircuit: true };
  return next(spec, ctx);
}`));
const { check, grading } = await import('./grader.js');

test('required keywords found, case-insensitive by default', () => {
  const r = check('Total: 42 EUR, paid by card', { required: ['total', 'eur'], forbidden: ['refund'] });
  assert.deepEqual([r.reward, r.passed], [1, true]);
});

test('a forbidden keyword zeroes the reward', () => {
  const r = check('total 42, refund issued', { required: ['total'], forbidden: ['refund'] });
  assert.deepEqual([r.reward, r.passed, r.present], [0, false, ['refund']]);
});

test('partial credit and case sensitivity', () => {
  const r = check('Total only', { required: ['total', 'EUR'], case_sensitive: true });
  assert.deepEqual([r.reward, r.missing], [0, ['total', 'EUR']]);
});

test('no keywords is unknown, naming the key', () => {
  const v = grading.grade({ metadata: '{"metadata": {}}' }, {}, { answer: 'x' });
  assert.equal(v.tag, 'unknown');
  assert.match(v.val, /no `required` or `forbidden`/);
});
