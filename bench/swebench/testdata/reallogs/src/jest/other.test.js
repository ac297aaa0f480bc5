// A second file whose tests all pass, for the per-file PASS/FAIL lines
// react-pdf's parser reads (`./node_modules/.bin/jest --no-color`).
test('formats', () => { expect('a'.toUpperCase()).toBe('A'); }); // passes
