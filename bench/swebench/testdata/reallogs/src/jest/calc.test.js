// jest, run as SWE-bench runs babel/docusaurus/immutable-js 2006:
//   npx jest calc.test.js --verbose
// and as immutable-js 2005 (--silent --json piped through jq).
describe('calc', () => {
  test('adds', () => { expect(2 + 2).toBe(4); });             // passes
  test('subtracts wrongly', () => { expect(3 - 1).toBe(1); }); // fails
  test('throws', () => { throw new Error('boom'); });          // errors: jest calls it failed
  test.skip('multiplies', () => { expect(true).toBe(false); }); // skipped
  test.todo('divides');                                        // todo
  describe('nested', () => {
    test('rounds', () => { expect(Math.round(1.4)).toBe(1); }); // passes
  });
});
test('top level', () => { expect(true).toBe(true); });         // passes
