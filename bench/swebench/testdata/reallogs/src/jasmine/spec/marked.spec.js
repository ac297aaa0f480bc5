// jasmine, run as SWE-bench runs marked:
//   ./node_modules/.bin/jasmine --no-color --config=jasmine.json
describe('marked', () => {
  it('parses headings', () => { expect(2 + 2).toBe(4); });          // passes
  it('parses lists wrongly', () => { expect(3 - 1).toBe(1); });     // fails
  it('throws', () => { throw new Error('boom'); });                 // errors: jasmine calls it failed
  xit('parses tables', () => { expect(true).toBe(false); });        // pending (skipped)
  describe('inline', () => {
    it('parses em', () => { expect('a').toBe('b'); });              // fails
  });
});
