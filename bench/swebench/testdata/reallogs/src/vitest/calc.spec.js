// vitest, run as SWE-bench runs vuejs/core:
//   npx vitest run calc.spec.js --no-watch --reporter=verbose
import { describe, test, expect } from 'vitest';

describe('calc', () => {
  test('adds', () => { expect(2 + 2).toBe(4); });             // passes
  test('subtracts wrongly', () => { expect(3 - 1).toBe(1); }); // fails
  test('throws', () => { throw new Error('boom'); });          // errors: vitest calls it failed
  test.skip('multiplies', () => { expect(true).toBe(false); }); // skipped
  test.todo('divides');                                        // todo
  describe('nested', () => {
    test('rounds', () => { expect(Math.round(1.4)).toBe(1); }); // passes
  });
});
